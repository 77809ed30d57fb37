"""engine-image/constraints.txt pins every runtime dependency of the images, at a version each
requirement accepts, and tests/dev-constraints.txt pins what the dev extras add; `make venv`
installs with both.

The images install `tokenpilot` and `tokenpilot-lab` with `--constraint` that file; a dependency
it does not pin would float to whatever PyPI serves on the day of the build. The requirement
graph is read from the metadata of the distributions installed in the test venv, so a new
requirement in either pyproject.toml (or in a new release of a dependency) fails here until
hack/pin-image-deps.sh is rerun.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "engine-image" / "constraints.txt"
DEV_CONSTRAINTS = REPO / "tests" / "dev-constraints.txt"
ROOTS = ("tokenpilot", "tokenpilot-lab")
# The extra of each root that `make venv` installs.
DEV_EXTRAS = {"tokenpilot": "dev", "tokenpilot-lab": "pytest"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(text: str) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version.strip(), (
            f"constraints.txt line {number} ({raw!r}) is not `name==version`; pins only"
        )
        pins[canonical(name)] = Version(version.strip())
    return pins


def requirement_closure(
    roots: tuple[str, ...], extras: dict[str, str] | None = None
) -> list[tuple[str, Requirement]]:
    """(who requires it, requirement) for the whole closure of `roots`, with `extras` of each
    root (none by default: the images' runtime)."""
    found: list[tuple[str, Requirement]] = []
    seen: set[str] = set()
    todo = [(root, Requirement(root)) for root in roots]
    while todo:
        parent, req = todo.pop()
        extra = (extras or {}).get(parent, "") if parent in roots else ""
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonical(req.name)
        if parent not in roots or name not in roots:
            found.append((parent, req))
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = distribution(req.name).requires or []
        except PackageNotFoundError:
            continue  # reported as unpinned below unless the file pins it
        todo += [(name, Requirement(r)) for r in requires]
    return [(parent, req) for parent, req in found if canonical(req.name) not in roots]


def unpinned(
    pins: dict[str, Version],
    roots: tuple[str, ...] = ROOTS,
    extras: dict[str, str] | None = None,
) -> list[str]:
    problems = []
    for parent, req in requirement_closure(roots, extras):
        name = canonical(req.name)
        pinned = pins.get(name)
        if pinned is None:
            problems.append(f"{name} (required by {parent} as {req}) has no pin")
        elif not req.specifier.contains(pinned, prereleases=True):
            problems.append(f"{name}=={pinned} does not satisfy {parent}'s {req}")
    return sorted(set(problems))


def test_every_runtime_dependency_of_the_images_is_pinned() -> None:
    problems = unpinned(parse_pins(CONSTRAINTS.read_text()))
    assert not problems, (
        "engine-image/constraints.txt is out of date; run hack/pin-image-deps.sh:\n  "
        + "\n  ".join(problems)
    )


def test_a_dependency_missing_from_the_file_is_named() -> None:
    pins = parse_pins(CONSTRAINTS.read_text())
    del pins["cryptography"]
    assert any(p.startswith("cryptography ") for p in unpinned(pins))


def test_a_pin_outside_the_required_range_is_named() -> None:
    pins = parse_pins(CONSTRAINTS.read_text())
    pins["kopf"] = Version("0.1")
    assert any(p.startswith("kopf==0.1 does not satisfy") for p in unpinned(pins))


def test_every_dev_dependency_of_the_venv_is_pinned() -> None:
    pins = parse_pins(CONSTRAINTS.read_text()) | parse_pins(DEV_CONSTRAINTS.read_text())
    problems = unpinned(pins, extras=DEV_EXTRAS)
    assert not problems, (
        "tests/dev-constraints.txt is out of date; run hack/pin-image-deps.sh:\n  "
        + "\n  ".join(problems)
    )


def test_the_venv_runs_the_pinned_versions() -> None:
    """What the tests run against is what the images ship: a venv made without the pins (or a
    dependency upgraded by hand) is named here rather than passing on other versions."""
    pins = parse_pins(CONSTRAINTS.read_text()) | parse_pins(DEV_CONSTRAINTS.read_text())
    drifted = []
    for name, pinned in sorted(pins.items()):
        try:
            installed = Version(distribution(name).version)
        except PackageNotFoundError:
            continue  # pinned for a platform or Python other than this one
        if installed != pinned:
            drifted.append(f"{name} {installed} installed, {pinned} pinned")
    assert not drifted, "the venv is not the pinned one; run `make venv`:\n  " + "\n  ".join(
        drifted
    )
