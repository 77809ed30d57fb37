"""What a policy over several GPU pools sees and answers: one Service over every pool's pods,
and one Deployment per pool.

`PoolsView.fleet` is the whole fleet as the Service selects it (every pool's Ready pods, their
pages, startups and batching); each `PoolView` is one pool's Deployment: its own pods' view
(`spec_replicas` its Deployment's replicas) and how long its oldest pod has waited
Unschedulable. A policy answers the replicas of every pool's Deployment, in the pools' order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot_lab.fleet.view import FleetView

# The scheduler's words for a pod no node can take, as a full pool's pods read.
UNSCHEDULABLE_MESSAGE = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class PoolView:
    """One pool's Deployment at an evaluation."""

    sku: str
    label: str  # its pods' pool label value (core.render.pool_label_value)
    view: FleetView
    # Seconds its oldest Unschedulable pod has waited (None: every pod placed).
    unschedulable_for_s: float | None = None


@dataclass(frozen=True, slots=True)
class PoolsView:
    """The inputs of one evaluation of a policy over pools."""

    fleet: FleetView
    pools: tuple[PoolView, ...]
    # The pool label of every Ready pod, by pod name (what a pod's labels say).
    pod_pools: dict[str, str]

    @property
    def ready_pools(self) -> list[str]:
        """The pool label of each Ready pod, as the operator lists its endpoints."""
        return [self.pod_pools[name] for name in self.fleet.pods if name in self.pod_pools]


@dataclass(frozen=True, slots=True)
class PoolsChoice:
    """Each pool's Deployment replicas, in the pools' order, and why in words; a pool's new
    batching where its pod template changes."""

    replicas: tuple[int, ...]
    reason: str
    # The (token budget, max_num_seqs) to roll a pool's Deployment to, in the pools' order
    # (None or absent: keep its template).
    batching: tuple[tuple[int, int] | None, ...] = ()


class PoolsPolicy(Protocol):
    """A stateful autoscaler over pools, evaluated every `interval_s` of virtual time."""

    name: str
    interval_s: float
    source: MetricsSourceType

    def decide(self, view: PoolsView) -> PoolsChoice: ...
