"""engine-image/constraints.txt pins every runtime dependency of the images, at a version each
requirement accepts.

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

CONSTRAINTS = Path(__file__).resolve().parents[2] / "engine-image" / "constraints.txt"
ROOTS = ("tokenpilot", "tokenpilot-lab")


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


def runtime_requirements(roots: tuple[str, ...]) -> list[tuple[str, Requirement]]:
    """(who requires it, requirement) for the whole runtime closure of `roots`, no extras."""
    found: list[tuple[str, Requirement]] = []
    seen: set[str] = set()
    todo = [(root, Requirement(root)) for root in roots]
    while todo:
        parent, req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
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


def unpinned(pins: dict[str, Version], roots: tuple[str, ...] = ROOTS) -> list[str]:
    problems = []
    for parent, req in runtime_requirements(roots):
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
