"""The layers stay honest: imports only go downward and the core never reads the clock."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

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


# ----- the simulator grades only what the operator can do ----------------------------------
# The operator contender (`tokenpilot`, `vllm-default-budget`) holds what a real operator
# holds: the GPU profile's step model, the spec a user writes, and the engines' /metrics. The
# engines' own timer (a hidden truth, a slowdown) and the trace's statistics never reach it.

SIMULATE_WORLD = REPO / "lab" / "tokenpilot_lab" / "commands" / "simulate" / "world.py"
OPERATOR_NAMES = ("tokenpilot", "vllm-default-budget")


def _simulate_args(*extra: str) -> Any:
    import argparse

    from tokenpilot_lab.commands.simulate import flags

    parser = argparse.ArgumentParser()
    flags.configure(parser)
    return parser.parse_args(
        ["--synthetic", "poisson", "--mean-rps", "1", "--duration", "120", *extra]
    )


def _operator_policies(world: Any, trace: Any) -> dict[str, Any]:
    """The autoscaling policy each operator contender runs under, built as `simulate` builds
    them: engines on `world.engine_timer`, the operator's model on `world.timer`."""
    from tokenpilot_lab.fleet.compare import contenders

    entries, _ = contenders(
        OPERATOR_NAMES,
        trace,
        world.fleet,
        tuned_engine=world.tuned_engine,
        default_engine=world.default_engine,
        planned_engine=world.planned_engine,
        timer=world.engine_timer,
        model_timer=world.timer,
        services=world.services,
    )
    return {e.name: e.make_policy().state.policy for e in entries}


def test_simulate_hands_the_operator_the_profiles_step_model_never_the_engines_timer() -> None:
    from tokenpilot.adapters.profiles import load_builtin_catalog
    from tokenpilot.api.model_shape import model_preset
    from tokenpilot.core.steptime import step_time_model
    from tokenpilot_lab.commands.simulate import flags, world

    profile_model = step_time_model(
        load_builtin_catalog().get("H100-80GB"), model_preset("llama-3.1-8b")
    )
    args = _simulate_args("--engine-truth", "memory-bandwidth", "--engine-slowdown", "1.2")
    trace = flags.load_trace(args)
    setup = world.setup(args, trace)
    # The engines run the truth and the slowdown; the profile's model is what the operator gets.
    assert setup.timer == profile_model
    assert setup.engine_timer != profile_model
    assert setup.engine_timer.iteration_s(8, 8000) > profile_model.iteration_s(8, 8000)
    for name, policy in _operator_policies(setup, trace).items():
        assert policy.replica_model.pricer == setup.timer, name
    # `simulate` itself passes exactly these: the engines' timer to the engines and the sizing,
    # the profile's to the operator.
    (call,) = [
        node
        for node in ast.walk(ast.parse(SIMULATE_WORLD.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "contenders"
    ]
    passed = {k.arg: ast.unparse(k.value) for k in call.keywords}
    assert passed["model_timer"] == "world.timer", passed
    assert passed["timer"] in ("timer", "world.engine_timer"), passed


def test_the_operators_policy_reads_nothing_of_the_trace() -> None:
    # Two traces as unlike as can be (short prompts at a trickle, long ones at a flood), the
    # same engines: the operator contenders get the same policy. What they learn of the load
    # comes from the engines' /metrics as the run goes (FleetView), never from the trace.
    from tokenpilot_lab.commands.simulate import flags, world
    from tokenpilot_lab.workload import poisson

    args = _simulate_args("--budget", "2048")
    setup = world.setup(args, flags.load_trace(args))
    trickle = poisson(0.2, 120.0, seed=1, median_prompt_tokens=100, median_output_tokens=10)
    flood = poisson(3.0, 120.0, seed=2, median_prompt_tokens=6000, median_output_tokens=600)
    assert _operator_policies(setup, trickle) == _operator_policies(setup, flood)


def test_the_tuner_is_given_no_statistic_of_the_trace() -> None:
    # No --budget and no hints: the tokenpilot engines' budget is what the operator's tuner
    # picks for a spec a user writes, the same for any trace.
    from tokenpilot_lab.commands.simulate import world
    from tokenpilot_lab.workload import poisson

    args = _simulate_args()
    short = poisson(1.0, 120.0, seed=1, median_prompt_tokens=200, median_output_tokens=50)
    long = poisson(1.0, 120.0, seed=1, median_prompt_tokens=6000, median_output_tokens=50)
    assert world.setup(args, short).tuned_engine == world.setup(args, long).tuned_engine
