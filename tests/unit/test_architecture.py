"""The layers stay honest: imports only go downward and the core never reads the clock."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

REPO = Path(__file__).resolve().parents[2]
CORE_DIRS = [
    REPO / "operator" / "tokenpilot" / "core",
    REPO / "operator" / "tokenpilot" / "api",
    *(REPO / "lab" / "tokenpilot_lab" / name for name in ("sim", "fleet", "workload")),
]

# Reading the clock or the environment inside a decision makes it untestable without sleeping.
FORBIDDEN_IN_CORE = re.compile(
    r"\btime\.(time|monotonic|perf_counter|sleep)\(|\bdatetime\.(now|utcnow|today)\(|"
    r"\bos\.environ\b|\bopen\(|\bsubprocess\b|\basyncio\.sleep\("
)


def test_import_contracts_hold(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    exit_code = lint_imports(config_filename=str(REPO / ".importlinter"), no_cache=True)
    assert exit_code == 0, capsys.readouterr().out


def test_core_reads_no_clock_and_does_no_io() -> None:
    offenders = []
    for directory in CORE_DIRS:
        for path in sorted(directory.rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                code = line.split("#", 1)[0]
                if FORBIDDEN_IN_CORE.search(code):
                    offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "I/O or clock in the pure core:\n" + "\n".join(offenders)


def test_handlers_read_time_from_the_clock_adapter() -> None:
    # adapters/clock.py is the one place the operator reads the time; a handler that reads it
    # itself cannot be driven by a test's or a simulator's clock.
    clock = re.compile(r"\btime\.(time|monotonic)\(|\bdatetime\.(now|utcnow)\(")
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "operator" / "tokenpilot" / "handlers").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if clock.search(line.split("#", 1)[0])
    ]
    assert not offenders, "read the time through adapters.clock: " + ", ".join(offenders)


def test_test_modules_have_unique_names() -> None:
    # The tiers are not packages, so pytest imports test modules by file name: two files with
    # one name in different tiers break the collection of the whole suite, not just one tier.
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted([*(REPO / "tests").rglob("test_*.py"), *(REPO / "e2e").rglob("test_*.py")]):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(REPO)} and {path.relative_to(REPO)}")
        seen.setdefault(path.name, path)
    assert not clashes, "rename one of each pair: " + "; ".join(clashes)


# The autoscaler's parts that only its state machine may put together: a module outside
# core/autoscale that imports one of these is a second autoscaling loop.
LOOP_PARTS = re.compile(
    r"^\s*from tokenpilot\.core\.autoscale(\.\w+)? import[^\n]*\b(decide|History|observe_rings|"
    r"push|forecast|remember)\b",
    re.MULTILINE,
)


def test_the_operator_and_the_simulator_run_the_same_step() -> None:
    from tokenpilot.core.autoscale import loop
    from tokenpilot.runtime import service_loop
    from tokenpilot_lab.fleet import operator

    assert service_loop.step is loop.step
    assert operator.step is loop.step
    copies = []
    for root in (REPO / "operator" / "tokenpilot", REPO / "lab" / "tokenpilot_lab", REPO / "bench"):
        for path in sorted(root.rglob("*.py")):
            if (REPO / "operator" / "tokenpilot" / "core" / "autoscale") in path.parents:
                continue
            source = path.read_text()
            # A multi-line import is joined so the names on later lines count too.
            joined = re.sub(r"\(\s*([^)]*)\)", lambda m: " ".join(m.group(1).split()), source)
            if LOOP_PARTS.search(joined):
                copies.append(str(path.relative_to(REPO)))
    assert not copies, "call core.autoscale.loop.step instead of its parts: " + ", ".join(copies)
