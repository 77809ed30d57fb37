"""The docs stay true: links resolve, generated pages match their generators, commands parse.

Links: every relative link in README.md and docs/ names a file that exists, and every #anchor
names a heading (GitHub's slug) or an explicit `<a id>` of the page it points into. Code blocks
and inline code are not read. Generated pages: each is compared with what its generator writes
today. Commands: every `tokenpilot SUBCOMMAND` a page names is a subcommand that builds its
parser (`--help` of it exits 0).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokenpilot import cli
from tokenpilot.api.reference import reference_markdown

REPO = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
# A command as a page shows it: at a line's start in a code block or a span, after `$ `, `&& `,
# `| ` or a path (`.venv/bin/tokenpilot`), never `helm install tokenpilot helm/...`.
_COMMAND = re.compile(r"(?:^|`|\$ |&& |\| |/)tokenpilot ([a-z][a-z-]+)", re.MULTILINE)

# Generated page -> the text its generator writes today.
GENERATED = {"docs/reference/api.md": reference_markdown}


def pages(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """The page without its code: fenced blocks and inline code spans removed."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its words
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    out: set[str] = set(_EXPLICIT_ANCHOR.findall(text))
    for heading in _HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(root: Path = REPO) -> list[str]:
    """'page: target (why)' for every relative link or anchor that does not resolve."""
    problems: list[str] = []
    cache: dict[Path, set[str]] = {}
    for page in pages(root):
        text = prose(page.read_text())
        for target in _LINK.findall(text) + _REF_LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(root)}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no such file)")
                continue
            if anchor and dest.suffix == ".md":
                known = cache.setdefault(dest, anchors(dest))
                if anchor not in known:
                    problems.append(f"{where} (no heading #{anchor} in {dest.name})")
    return problems


def test_every_relative_link_and_anchor_resolves() -> None:
    problems = broken_links()
    assert not problems, "broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", sorted(GENERATED))
def test_generated_page_matches_its_generator(page: str) -> None:
    committed = (REPO / page).read_text()
    assert committed == GENERATED[page](), (
        f"{page} is stale: regenerate it (`tokenpilot crd --reference`) and commit the result"
    )


def named_commands(root: Path = REPO) -> set[str]:
    names: set[str] = set()
    for page in pages(root):
        text = page.read_text()
        code = [m.group(0) for m in _FENCE.finditer(text)]
        spans = _INLINE_CODE.findall(_FENCE.sub("", text))
        for block in [*code, *spans]:
            names |= set(_COMMAND.findall(block.strip("`~")))
    return names


def test_every_command_a_page_names_parses() -> None:
    known = set(cli.COMMANDS) | set(cli.LAB_COMMANDS)
    named = named_commands()
    unknown = sorted(named - known)
    assert not unknown, f"pages name subcommands that do not exist: {unknown}"
    for name in sorted(named):
        parser = cli.build_parser([name])
        with pytest.raises(SystemExit) as exited:
            parser.parse_args([name, "--help"])
        assert exited.value.code == 0, name
