"""The contenders on pools, on one trace: how each is set up, and the runs in order.

Every contender runs the same pools: each pool's engines its GPU's step model at the budget
the operator plans for that pool at creation (`core.render_plan.plan` of the pooled
LLMService: the first pool's tuning, every other pool its own GPU's answer), each pool billed
at its price. They differ in who sets each pool's replicas:
- `tokenpilot`: the operator's autoscaler and pool split (fleet.pool_operator);
- `hpa-per-pool`: one HPA per pool Deployment on running requests per pod, each target the
  load one replica of that pool carries at the fastest replay of the busiest 5 min meeting
  99 % (fleet.sizing on that pool's engines), each bounded by its pool (minReplicas at least
  1, as an HPA's is);
- `static-split`: fixed replicas per pool, `pool_baselines.static_split` of each pool's
  peak-sized static fleet (fleet.sizing, the busiest and the first 5 min, on that pool alone).
Every autoscaler opens on the same split of the fleets the first 5 min need on each pool alone,
as if the trace were cut from a day its fleet had already adapted to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMService
from tokenpilot.api.model_shape import model_preset
from tokenpilot.core.plan_inputs import plan_inputs
from tokenpilot.core.render import pool_label_value
from tokenpilot.core.render_plan import plan
from tokenpilot.core.steptime import step_time_model
from tokenpilot_lab.fleet.config import FleetConfig
from tokenpilot_lab.fleet.policies import HpaPolicy, StaticPolicy
from tokenpilot_lab.fleet.pool_baselines import PerPoolPolicy, static_split
from tokenpilot_lab.fleet.pool_operator import PoolsOperator, pool_nodes
from tokenpilot_lab.fleet.pool_simulator import FleetPool, PooledResult, simulate_pools
from tokenpilot_lab.fleet.pool_view import PoolsPolicy
from tokenpilot_lab.fleet.sizing import Sizing, size_for_opening, size_for_peak
from tokenpilot_lab.sim import EngineConfig
from tokenpilot_lab.workload import Trace

POOL_CONTENDERS = ("tokenpilot", "hpa-per-pool", "static-split")


def planned_pools(
    service: LLMService,
    by_name: Callable[[str], GPUProfile],
    by_product: Callable[[str], GPUProfile],
    usd_per_gpu_hour: Mapping[str, float],
    *,
    enable_prefix_caching: bool = True,
    nodes_run_out_s: Mapping[str, float] | None = None,
) -> tuple[FleetPool, ...]:
    """Each pool of `service` as the operator plans it at creation: its GPU's engine at the
    pool's budget, its price, its bounds."""
    spec = service.spec
    profiles = [by_name(p.sku) for p in spec.accelerator.pools]
    created = plan(
        service,
        nodes=pool_nodes(profiles),
        by_name=by_name,
        by_product=by_product,
        service_monitor_served=False,
    )
    shape = model_preset(spec.model.shape.preset) if spec.model.shape.preset else None
    if shape is None:
        raise ValueError("the pooled fleet needs a model preset (spec.model.shape.preset)")
    out = []
    for pool, profile, planned in zip(spec.accelerator.pools, profiles, created.pools, strict=True):
        inputs = plan_inputs(spec, profile)
        batching = planned.facts.batching
        out.append(
            FleetPool(
                sku=pool.sku,
                label=pool_label_value(pool.sku),
                engine=EngineConfig.planned(
                    inputs.capacity,
                    max_num_batched_tokens=batching.token_budget,
                    max_num_seqs=batching.max_num_seqs,
                    enable_prefix_caching=enable_prefix_caching,
                ),
                timer=step_time_model(profile, shape, spec.engine.tensor_parallel_size),
                usd_per_gpu_hour=usd_per_gpu_hour[pool.sku],
                gpus_per_replica=pool.gpus_per_replica or spec.gpus_per_replica,
                min_replicas=pool.min_replicas,
                max_replicas=pool.max_replicas,
                nodes_run_out_s=(nodes_run_out_s or {}).get(pool.sku),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PoolSizing:
    """Each pool's sizings on its own engines: the first 5 min (the opening fleet) and the
    peak (the static fleet and the HPA's target)."""

    opening: tuple[Sizing, ...]
    peak: tuple[Sizing, ...]
    opening_split: tuple[int, ...]
    static_split: tuple[int, ...]


def size_pools(trace: Trace, fleet: FleetConfig, pools: Sequence[FleetPool]) -> PoolSizing:
    """fleet.sizing on each pool alone, and the static splits of its answers."""
    openings, peaks = [], []
    for pool in pools:
        alone = replace(
            fleet,
            gpus_per_replica=pool.gpus_per_replica,
            usd_per_gpu_hour=pool.usd_per_gpu_hour,
            min_replicas=1,
            max_replicas=max(1, pool.max_replicas),
            initial_replicas=None,
        )
        opening = size_for_opening(trace, alone, pool.engine, pool.timer)
        openings.append(opening)
        peaks.append(size_for_peak(trace, alone, pool.engine, pool.timer, opening=opening))
    prices = [p.usd_per_gpu_hour * p.gpus_per_replica for p in pools]
    mins = [p.min_replicas for p in pools]
    maxes = [p.max_replicas for p in pools]
    return PoolSizing(
        tuple(openings),
        tuple(peaks),
        tuple(static_split([s.replicas for s in openings], prices, mins, maxes)),
        tuple(static_split([s.replicas for s in peaks], prices, mins, maxes)),
    )


@dataclass(frozen=True, slots=True)
class PoolContender:
    name: str
    make_policy: Callable[[], PoolsPolicy]
    pools: tuple[FleetPool, ...]


def pool_contenders(
    names: Sequence[str],
    service: LLMService,
    by_name: Callable[[str], GPUProfile],
    by_product: Callable[[str], GPUProfile],
    pools: Sequence[FleetPool],
    sizing: PoolSizing,
) -> list[PoolContender]:
    """The named contenders (of POOL_CONTENDERS); see the module docstring."""
    opening = sizing.opening_split
    out = []
    for name in names:
        if name == "tokenpilot":
            opened = tuple(
                replace(p, initial_replicas=n) for p, n in zip(pools, opening, strict=True)
            )
            labels = {p.label: n for p, n in zip(pools, opening, strict=True)}

            def make(labels: dict[str, int] = labels) -> PoolsPolicy:
                return PoolsOperator.created(service, by_name, by_product, labels)

            out.append(PoolContender(name, make, opened))
        elif name == "hpa-per-pool":
            lows = [max(1, p.min_replicas) for p in pools]
            hpa_pools = tuple(
                replace(p, min_replicas=lo, initial_replicas=max(lo, n))
                for p, lo, n in zip(pools, lows, opening, strict=True)
            )
            targets = [s.target_running_per_replica for s in sizing.peak]

            def make_hpa(
                targets: list[float] = targets, hpa_pools: tuple[FleetPool, ...] = hpa_pools
            ) -> PoolsPolicy:
                return PerPoolPolicy(
                    tuple(
                        HpaPolicy(t, p.min_replicas, p.max_replicas, name=f"hpa-{p.label}")
                        for t, p in zip(targets, hpa_pools, strict=True)
                    ),
                    "hpa-per-pool",
                )

            out.append(PoolContender(name, make_hpa, hpa_pools))
        elif name == "static-split":
            counts = sizing.static_split
            fixed = tuple(
                replace(p, min_replicas=n, max_replicas=n, initial_replicas=n)
                for p, n in zip(pools, counts, strict=True)
            )

            def make_static(counts: tuple[int, ...] = counts) -> PoolsPolicy:
                return PerPoolPolicy(
                    tuple(StaticPolicy(n, name=f"static-{i}") for i, n in enumerate(counts)),
                    "static-split",
                )

            out.append(PoolContender(name, make_static, fixed))
        else:
            raise ValueError(f"unknown pool contender {name!r}; use some of {POOL_CONTENDERS}")
    return out


def run_pool_contenders(
    trace: Trace,
    fleet: FleetConfig,
    entries: Sequence[PoolContender],
    progress: Callable[[str, float], None] | None = None,
) -> list[PooledResult]:
    """Run each contender on `trace`, one after another (deterministic: no threads)."""
    results = []
    for entry in entries:
        step = None if progress is None else _bind(progress, entry.name)
        results.append(simulate_pools(trace, entry.make_policy(), fleet, entry.pools, step))
    return results


def _bind(progress: Callable[[str, float], None], name: str) -> Callable[[float], None]:
    return lambda fraction: progress(name, fraction)
