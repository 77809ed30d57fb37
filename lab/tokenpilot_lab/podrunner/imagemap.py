"""The image-to-command mapping: which container images run as which local command, and what
is added to a pod's args when the image runs as a container of itself (`container_args`).

Globs are translated to one anchored regular expression that both this module and kwok's stage
templates (Go RE2) use, so the pod runner and kwok always agree on which pods are real.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tokenpilot_lab.host.errors import ImageMapError
from tokenpilot_lab.inputfile import InputFile

PLACEHOLDERS = ("{python}", "{args}", "{pod_ip}", "{port}")


class ImageRule(BaseModel):
    """Either a `command` the image runs as, or the `pullError` pulling it fails with."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    image: str = Field(min_length=1, description="glob over the full image reference")
    command: list[str] | None = Field(None, min_length=1)
    # The container's args when the image runs as a container (host network, so a server must
    # bind the pod IP): `{args}` is the pod's args. Default: the pod's args unchanged.
    container_args: list[str] = Field(default_factory=lambda: ["{args}"])
    pull_error: str | None = Field(
        None,
        alias="pullError",
        description="the image cannot be pulled: the container waits in ErrImagePull, then "
        "ImagePullBackOff, with this error, as on a node that cannot reach the registry",
    )

    @model_validator(mode="after")
    def _command_or_pull_error(self) -> ImageRule:
        if (self.command is None) == (self.pull_error is None):
            raise ValueError("give either command (what the image runs) or pullError, not both")
        return self

    @field_validator("command", "container_args")
    @classmethod
    def _known_placeholders(cls, command: list[str] | None) -> list[str] | None:
        for word in command or []:
            for name in re.findall(r"\{[^{}]*\}", word):
                if name not in PLACEHOLDERS:
                    raise ValueError(
                        f"unknown placeholder {name}; use one of {', '.join(PLACEHOLDERS)}"
                    )
        return command


class ImageMap(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    images: list[ImageRule] = Field(default_factory=list)

    def rule_for(self, image: str) -> ImageRule | None:
        for rule in self.images:
            if re.fullmatch(glob_to_regex(rule.image), image):
                return rule
        return None

    def regex(self) -> str:
        """One anchored RE2-compatible expression matching every mapped image ('' if none)."""
        if not self.images:
            return ""
        return "^(?:" + "|".join(glob_to_regex(r.image) for r in self.images) + ")$"


def glob_to_regex(glob: str) -> str:
    out = []
    for char in glob:
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        else:
            out.append(re.escape(char))
    return "".join(out)


def default_path() -> Path:
    return Path(str(resources.files("tokenpilot_lab.podrunner") / "data" / "images.yaml"))


_FILE = InputFile(
    what="image map", top_key="images", model=ImageMap, error=ImageMapError, default=default_path()
)


def parse(text: str, source: str) -> ImageMap:
    return _FILE.parse(text, source)


def load(path: Path | None) -> ImageMap:
    return _FILE.load(path)


# The kubelet's expansion of `$(VAR)` in a container's command and args: a variable the container
# defines is replaced, an undefined one is left as written, and `$$` is an escaped `$`.
_VAR_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_vars(word: str, env: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return _VAR_REFERENCE.sub(substitute, word)


def render_command(
    rule: ImageRule,
    *,
    args: Sequence[str],
    pod_ip: str,
    port: int | None,
    python: str = sys.executable,
) -> list[str]:
    """The argv to run: `{args}` alone in a word splices the container args in."""
    return _render(rule.command or [], args=args, pod_ip=pod_ip, port=port, python=python)


def render_container_args(
    rule: ImageRule, *, args: Sequence[str], pod_ip: str, port: int | None
) -> list[str]:
    """The args of the container, after the image's entrypoint."""
    return _render(rule.container_args, args=args, pod_ip=pod_ip, port=port, python="python")


def _render(
    template: Sequence[str], *, args: Sequence[str], pod_ip: str, port: int | None, python: str
) -> list[str]:
    values: Mapping[str, str] = {
        "{python}": python,
        "{pod_ip}": pod_ip,
        "{port}": "" if port is None else str(port),
    }
    argv: list[str] = []
    for word in template:
        if word == "{args}":
            argv.extend(args)
            continue
        for name, value in values.items():
            word = word.replace(name, value)
        argv.append(word.replace("{args}", " ".join(args)))
    return argv
