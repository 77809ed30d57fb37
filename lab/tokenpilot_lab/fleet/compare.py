"""Every policy on the same trace: how each contender is set up, and the runs in order.

Baselines run vLLM with its default token budget, as a deployment without TokenPilot would;
`tokenpilot` runs the tuned budget; `vllm-default-budget` is TokenPilot's scaling with the
default budget, so the difference between the two is what tuning buys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from tokenpilot.api.llmservice import LLMServiceSpec
from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.spec import evaluation_interval_s, policy_from_spec
from tokenpilot.core.errors import InvalidSpec
from tokenpilot_lab.fleet.config import FleetConfig
from tokenpilot_lab.fleet.policies import HpaPolicy, KedaPolicy, KpaPolicy, StaticPolicy
from tokenpilot_lab.fleet.policies.base import FleetPolicy
from tokenpilot_lab.fleet.policies.tokenpilot import TokenPilotPolicy
from tokenpilot_lab.fleet.results import FleetResult
from tokenpilot_lab.fleet.simulator import ProgressFn, simulate
from tokenpilot_lab.fleet.sizing import Sizing, size_for_opening, size_for_peak
from tokenpilot_lab.sim import EngineConfig, StepTimer
from tokenpilot_lab.workload import Trace

POLICY_NAMES = ("tokenpilot", "static-peak", "hpa", "keda", "aibrix-kpa", "vllm-default-budget")


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
    sizing: Sizing | None = None,
    target_running_per_replica: float | None = None,
    model: str = "llama-3.1-8b",
) -> tuple[list[Contender], Sizing | None]:
    """Build the named contenders; sizes the static fleet (and the HPA/KPA target) if needed."""
    needs_sizing = any(n in ("static-peak", "hpa", "aibrix-kpa") for n in names)
    if sizing is None and needs_sizing:
        sizing = size_for_peak(trace, fleet, default_engine, timer)
    target = target_running_per_replica or (sizing.target_running_per_replica if sizing else 1.0)
    autoscaled_fleet = fleet
    if fleet.initial_replicas is None and any(n != "static-peak" for n in names):
        # Every autoscaler starts from the same fleet: what the opening window needs.
        opening = size_for_opening(trace, fleet, default_engine, timer)
        autoscaled_fleet = replace(fleet, initial_replicas=opening.replicas)
    lo, hi = fleet.min_replicas, fleet.max_replicas
    autoscale, interval_s = operator_autoscaling(fleet, model)
    out: list[Contender] = []
    for name in names:
        if name == "tokenpilot":
            out.append(
                Contender(
                    name,
                    lambda: TokenPilotPolicy(autoscale, interval_s=interval_s),
                    tuned_engine,
                    autoscaled_fleet,
                )
            )
        elif name == "vllm-default-budget":
            out.append(
                Contender(
                    name,
                    lambda: TokenPilotPolicy(
                        autoscale, name="vllm-default-budget", interval_s=interval_s
                    ),
                    default_engine,
                    autoscaled_fleet,
                )
            )
        elif name == "static-peak":
            assert sizing is not None
            n = sizing.replicas
            static_fleet = replace(fleet, initial_replicas=n)
            out.append(Contender(name, partial(StaticPolicy, n), default_engine, static_fleet))
        elif name == "hpa":
            out.append(
                Contender(name, lambda: HpaPolicy(target, lo, hi), default_engine, autoscaled_fleet)
            )
        elif name == "keda":
            out.append(
                Contender(name, lambda: KedaPolicy(lo, hi), default_engine, autoscaled_fleet)
            )
        elif name == "aibrix-kpa":
            out.append(
                Contender(name, lambda: KpaPolicy(target, lo, hi), default_engine, autoscaled_fleet)
            )
    return out, sizing


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
        results.append(
            simulate(trace, entry.make_policy(), entry.fleet, entry.engine_config, timer, step)
        )
    return results


def _bind(progress: Callable[[str, float], None], name: str) -> ProgressFn:
    return lambda fraction: progress(name, fraction)
