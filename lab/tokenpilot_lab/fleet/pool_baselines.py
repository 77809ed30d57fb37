"""The baselines on pools, as their users run them on a fleet of several GPU types.

- `PerPoolPolicy`: one autoscaler per pool Deployment, each the single-SKU policy (an HPA,
  a fixed count) on its own pool's pods, its own target and its pool's bounds: what one
  HorizontalPodAutoscaler per Deployment gives. They share the Service, and nothing else.
- `static_split`: the fixed replicas per pool for a load, from the static fleet each pool
  would need alone (fleet.sizing on that pool's engines): the pools fill in order of what
  carrying the whole load on each would cost, each up to its maxReplicas, and the share a pool
  cannot carry goes to the next in proportion to its own fleet for the whole load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot_lab.fleet.policies.base import FleetPolicy
from tokenpilot_lab.fleet.pool_view import PoolsChoice, PoolsView


@dataclass(slots=True)
class PerPoolPolicy:
    """One single-SKU policy per pool, in the pools' order, each deciding its pool alone."""

    policies: tuple[FleetPolicy, ...]
    name: str
    interval_s: float = field(init=False)
    source: MetricsSourceType = field(init=False)

    def __post_init__(self) -> None:
        intervals = {p.interval_s for p in self.policies}
        sources = {p.source for p in self.policies}
        if len(intervals) != 1 or len(sources) != 1:
            # One evaluation clock for all: the per-pool policies must share it.
            raise ValueError("the per-pool policies must share one interval and one source")
        self.interval_s = intervals.pop()
        self.source = sources.pop()

    def decide(self, view: PoolsView) -> PoolsChoice:
        choices = [p.decide(pv.view) for p, pv in zip(self.policies, view.pools, strict=True)]
        return PoolsChoice(
            tuple(c.replicas for c in choices),
            "; ".join(f"{pv.sku}: {c.reason}" for pv, c in zip(view.pools, choices, strict=True)),
        )


def static_split(
    alone: Sequence[int],
    price_per_replica_hour: Sequence[float],
    min_replicas: Sequence[int],
    max_replicas: Sequence[int],
) -> list[int]:
    """Replicas per pool for the load each pool's `alone` replicas would carry by themselves;
    see the module docstring (ties keep the pools' order)."""
    order = sorted(range(len(alone)), key=lambda i: (alone[i] * price_per_replica_hour[i], i))
    counts = list(min_replicas)
    left = 1.0 - sum(n / max(1, a) for n, a in zip(counts, alone, strict=True))
    for i in order:
        if left <= 1e-9:
            break
        extra = min(max_replicas[i] - counts[i], math.ceil(left * alone[i] - 1e-9))
        if extra > 0:
            counts[i] += extra
            left -= extra / max(1, alone[i])
    return counts
