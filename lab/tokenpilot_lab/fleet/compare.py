"""Every policy on the same trace: how each contender is set up, and the runs in order.

Baselines run vLLM with its default token budget, as a deployment without TokenPilot would,
and again on a budget TokenPilot's tuner plans (`static-peak+tuned`, `hpa+tuned`, `keda+tuned`,
`aibrix-kpa+tuned`: the `planned_engine`, for the figures a user who knows the traffic would
give `tokenpilot plan`). `tokenpilot` runs its spec (fleet.service): it opens on the budget the
reconciler tunes from the spec and re-tunes as it learns the workload; `vllm-default-budget` is
TokenPilot's scaling on a spec with vLLM's default integers. So `tokenpilot` against
`vllm-default-budget` is what tuning buys, and `tokenpilot` against the `+tuned` rows what the
policy buys. Every baseline's target, the static fleets and every autoscaler's opening fleet
are sized by one measured procedure on the budget the contender starts on (`fleet.sizing`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMService, LLMServiceSpec
from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.autoscale.loop import ServiceState
from tokenpilot.core.autoscale.spec import evaluation_interval_s, policy_from_spec
from tokenpilot.core.errors import InvalidSpec
from tokenpilot_lab.fleet.config import FleetConfig
from tokenpilot_lab.fleet.operator import OperatorPolicy, RestartMemory
from tokenpilot_lab.fleet.policies import HpaPolicy, KedaPolicy, KpaPolicy, StaticPolicy
from tokenpilot_lab.fleet.policies.base import FleetPolicy
from tokenpilot_lab.fleet.results import FleetResult
from tokenpilot_lab.fleet.service import ServiceTuning
from tokenpilot_lab.fleet.simulator import ProgressFn, simulate
from tokenpilot_lab.fleet.sizing import (
    BUSIEST_BASIS,
    FIXED_BASIS,
    STEADY_BASIS,
    Capacity,
    Sizing,
    measure_capacity,
    size_for_opening,
    size_for_peak,
)
from tokenpilot_lab.sim import EngineConfig, StepTimer
from tokenpilot_lab.workload import Trace, steady, window

POLICY_NAMES = (
    "tokenpilot",
    "static-peak",
    "hpa",
    "keda",
    "aibrix-kpa",
    "vllm-default-budget",
    "hpa+tuned",
    "keda+tuned",
    "aibrix-kpa+tuned",
    "static-peak+tuned",
)
# The baselines, each also run on TokenPilot's tuned budget as `<name>+tuned`.
BASELINES = ("static-peak", "hpa", "keda", "aibrix-kpa")
TUNED_SUFFIX = "+tuned"


@dataclass(frozen=True, slots=True)
class OperatorServices:
    """The LLMServices the operator contenders run, as their users would write them, and the
    GPU profile the operator holds for their SKU."""

    tokenpilot: LLMService
    default_budget: LLMService
    profile: GPUProfile


@dataclass(frozen=True, slots=True)
class Contender:
    name: str
    make_policy: Callable[[], FleetPolicy]
    engine_config: EngineConfig
    fleet: FleetConfig


def parse_policies(text: str) -> tuple[str, ...]:
    """`all` or a comma list of POLICY_NAMES, in the order given."""
    if text.strip() == "all":
        return POLICY_NAMES
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in POLICY_NAMES]
    if unknown or not names:
        raise InvalidSpec(
            f"--policy: unknown {', '.join(unknown) or '(none given)'}; "
            f"use 'all' or some of {', '.join(POLICY_NAMES)}"
        )
    return names


def operator_autoscaling(fleet: FleetConfig, model: str) -> tuple[AutoscalePolicy, float]:
    """The policy and interval the operator would derive for an LLMService with these bounds
    and SLOs (everything else at the API's defaults), through the operator's own functions."""
    spec = LLMServiceSpec.model_validate(
        {
            "model": {
                "name": model,
                "source": f"file:///models/{model}",
                "shape": {"preset": model},
            },
            "slo": {"ttftP99": _ms(fleet.ttft_slo_s), "itlP99": _ms(fleet.itl_slo_s)},
            "autoscaling": {
                "enabled": True,
                "minReplicas": fleet.min_replicas,
                "maxReplicas": fleet.max_replicas,
            },
        }
    )
    return policy_from_spec(spec), evaluation_interval_s(spec)


def _ms(seconds: float) -> str:
    """A duration as the API writes it (`[0-9]+(.[0-9]+)?ms`)."""
    return f"{seconds * 1000:.3f}".rstrip("0").rstrip(".") + "ms"


def contenders(
    names: Sequence[str],
    trace: Trace,
    fleet: FleetConfig,
    *,
    tuned_engine: EngineConfig,
    default_engine: EngineConfig,
    timer: StepTimer,
    model_timer: StepTimer,
    planned_engine: EngineConfig | None = None,
    services: OperatorServices | None = None,
    sizing: Sizing | None = None,
    target_running_per_replica: float | None = None,
    steady_targets: bool = False,
    model: str = "llama-3.1-8b",
    operator_restarts_s: tuple[float, ...] = (),
    restart_memory: RestartMemory = RestartMemory.shutdown,
) -> tuple[list[Contender], Sizing | None]:
    """Build the named contenders. The static fleets, the baselines' targets and every
    autoscaler's opening fleet are sized on the budget the contender runs; the sizing returned
    is the default budget's, with the tuned budget's capacity and static fleet beside it.

    The baselines' targets are measured on the busiest 5 min replayed faster, or, with
    `steady_targets`, on a steady load test of its requests (`workload.steady`): what a user
    who sized the target with a fixed-rate benchmark of the production mix would set.

    `timer` is what the engines run at, and every measurement is made on it; `model_timer`
    is the GPU profile's price, which the operator's capacity model uses (the engines' timer
    only where they run at the profile's price: the operator never holds the engines' own).

    `tuned_engine` is what `tokenpilot` opens on, `planned_engine` (None: the same) what the
    +tuned baselines run. With `services` the operator contenders run those specs through the
    reconciler's tuning and re-tune as they learn (fleet.service); without, they keep
    `tuned_engine` or `default_engine` and the autoscaler's policy for the fleet's bounds and
    SLOs, priced by `model_timer` (the mechanics' tests, on synthetic step timers)."""
    planned = tuned_engine if planned_engine is None else planned_engine

    if steady_targets and target_running_per_replica is not None:
        raise ValueError(
            "steady_targets measures the targets and target_running_per_replica sets them: pass one"
        )

    def budget(engine: EngineConfig) -> str:
        if engine is default_engine:
            return "default"
        return "tuned" if engine is planned else "opening"

    openings: dict[str, Sizing] = {}
    sizings: dict[str, Sizing] = {} if sizing is None else {"default": sizing}
    capacities: dict[str, Capacity] = {}

    def opening(engine: EngineConfig) -> Sizing:
        key = budget(engine)
        if key not in openings:
            openings[key] = size_for_opening(trace, fleet, engine, timer)
        return openings[key]

    def peak_sizing(engine: EngineConfig) -> Sizing:
        key = budget(engine)
        if key not in sizings:
            sizings[key] = size_for_peak(trace, fleet, engine, timer, opening=opening(engine))
        return sizings[key]

    def capacity(engine: EngineConfig) -> Capacity:
        key = budget(engine)
        if key not in capacities:
            if target_running_per_replica is not None:
                capacities[key] = Capacity(target_running_per_replica, target_running_per_replica)
            elif not steady_targets and key in sizings:
                # The static fleet's sizing measured it already, on the same window.
                capacities[key] = Capacity(
                    sizings[key].target_running_per_replica,
                    sizings[key].target_in_flight_per_replica,
                )
            else:
                load_test = steady(_peak(trace), seed=0) if steady_targets else _peak(trace)
                capacities[key] = measure_capacity(load_test, fleet, engine, timer)
        return capacities[key]

    def autoscaled(engine: EngineConfig) -> FleetConfig:
        # An autoscaler starts from what the opening window needs on the budget it runs, as
        # if the trace were cut from a day its fleet had already adapted to.
        if fleet.initial_replicas is not None:
            return fleet
        return replace(fleet, initial_replicas=opening(engine).replicas)

    def engine_of(name: str) -> EngineConfig:
        if name == "tokenpilot":
            return tuned_engine
        return planned if name.endswith(TUNED_SUFFIX) else default_engine

    if any(n.startswith("static-peak") for n in names):
        # The table reports the default budget's sizing. A budget with a static fleet is sized
        # before any target is asked for, so its baselines' target is that same measurement
        # whatever the order of `names`.
        peak_sizing(default_engine)
        if f"static-peak{TUNED_SUFFIX}" in names:
            peak_sizing(planned)
    lo, hi = fleet.min_replicas, fleet.max_replicas
    autoscale, interval_s = operator_autoscaling(fleet, model)
    out: list[Contender] = []
    for name in names:
        engine = engine_of(name)
        base = name.removesuffix(TUNED_SUFFIX)
        if base in ("tokenpilot", "vllm-default-budget") and services is not None:
            service = services.tokenpilot if base == "tokenpilot" else services.default_budget
            make: Callable[[], FleetPolicy] = partial(
                _served_operator,
                name,
                service,
                services.profile,
                operator_restarts_s,
                restart_memory,
            )
            out.append(Contender(name, make, engine, autoscaled(engine)))
        elif base in ("tokenpilot", "vllm-default-budget"):
            # The start-up is the operator's own: assumed until the run's first new replica
            # is Ready, then measured from it (core.autoscale.plan.StartupMemory).
            policy = replace(
                autoscale,
                # One replica as the operator's autoscaler prices it.
                replica_model=ReplicaModel(
                    pricer=model_timer,
                    token_budget=engine.max_num_batched_tokens,
                    max_num_seqs=engine.max_num_seqs,
                    num_kv_tokens=engine.kv_capacity_tokens,
                    itl_slo_s=fleet.itl_slo_s,
                    ttft_slo_s=fleet.ttft_slo_s,
                ),
            )
            make = partial(_operator, name, policy, interval_s, operator_restarts_s, restart_memory)
            out.append(Contender(name, make, engine, autoscaled(engine)))
        elif base == "static-peak":
            n = peak_sizing(engine).replicas
            static_fleet = replace(fleet, initial_replicas=n)
            out.append(Contender(name, partial(StaticPolicy, n, name), engine, static_fleet))
        else:
            make = partial(_BASELINE_POLICIES[base], _target(base, capacity(engine)), lo, hi, name)
            out.append(Contender(name, make, engine, autoscaled(engine)))
    default = sizings.get("default")
    if default is not None:
        tuned = sizings.get("tuned")
        # The table reports the targets the baselines ran, on both budgets and from one
        # source, even where no default-budget baseline runs.
        targets = capacity(default_engine)
        default = replace(
            default,
            target_running_per_replica=targets.running_per_replica,
            target_in_flight_per_replica=targets.in_flight_per_replica,
            tuned_capacity=capacities.get("tuned"),
            tuned_static=tuned,
            target_basis=(
                FIXED_BASIS
                if target_running_per_replica is not None
                else STEADY_BASIS
                if steady_targets
                else BUSIEST_BASIS
            ),
        )
    return out, default


_BASELINE_POLICIES: dict[str, Callable[..., FleetPolicy]] = {
    "hpa": HpaPolicy,
    "keda": KedaPolicy,
    "aibrix-kpa": KpaPolicy,
}


def _target(base: str, capacity: Capacity) -> float:
    """KEDA's threshold counts requests in flight (its query adds the waiting ones); the HPA's
    and KPA's target counts running requests."""
    return capacity.in_flight_per_replica if base == "keda" else capacity.running_per_replica


def _operator(
    name: str,
    policy: AutoscalePolicy,
    interval_s: float,
    restarts_s: tuple[float, ...],
    restart_memory: RestartMemory,
) -> FleetPolicy:
    state = ServiceState(policy, interval_s=interval_s)
    return OperatorPolicy(state, name=name, restarts_at_s=restarts_s, restart_memory=restart_memory)


def _served_operator(
    name: str,
    service: LLMService,
    profile: GPUProfile,
    restarts_s: tuple[float, ...],
    restart_memory: RestartMemory,
) -> FleetPolicy:
    tuning = ServiceTuning.of(service, profile)
    state = ServiceState(tuning.policy(()), interval_s=evaluation_interval_s(service.spec))
    return OperatorPolicy(
        state,
        service=tuning,
        name=name,
        restarts_at_s=restarts_s,
        restart_memory=restart_memory,
    )


def _peak(trace: Trace) -> Trace:
    """The busiest 5 min of `trace`, where the baselines' targets are measured."""
    start_s = trace.peak_window_start_s(300.0)
    end_s = min(trace.duration_s, start_s + 300.0)
    return window(trace, start_s, end_s) if end_s > start_s else trace


def run_contenders(
    trace: Trace,
    entries: Sequence[Contender],
    timer: StepTimer,
    progress: Callable[[str, float], None] | None = None,
) -> list[FleetResult]:
    """Run each contender on `trace`, one after another (deterministic: no threads)."""
    results: list[FleetResult] = []
    for entry in entries:
        step: ProgressFn | None = None
        if progress is not None:
            step = _bind(progress, entry.name)
        policy = entry.make_policy()
        result = simulate(trace, policy, entry.fleet, entry.engine_config, timer, step)
        if isinstance(policy, OperatorPolicy):
            # What the operator would have warned of, under its row, and what it knew and did.
            result = replace(
                result, notes=(*result.notes, *policy.notes()), operator=policy.report()
            )
        results.append(result)
    return results


def _bind(progress: Callable[[str, float], None], name: str) -> ProgressFn:
    return lambda fraction: progress(name, fraction)
