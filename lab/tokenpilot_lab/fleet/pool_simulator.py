"""The fleet on several GPU pools: one Deployment per pool behind one balancer, each pool's
engines its GPU's engine model at its own budget, each billed at its own price.

The loop is `FleetSimulation`'s (fleet.simulator); what differs:
- Every replica belongs to a pool and runs that pool's engine (its GPU's step model, its
  budget). The balancer picks among every pool's Ready replicas (a Service selects them all;
  `least-request` is an endpoint picker over the same pods).
- The policy answers each pool's replicas (fleet.pool_view); a pool's scale-down removes its
  Pending pods first, then its starting ones, then its newest Ready one, as a ReplicaSet does.
- A pool whose nodes run out (`FleetPool.nodes_run_out_s`) places no new pod from then on:
  its new pods stay Pending (Unschedulable) and never serve. Its pods already placed keep
  their GPUs. A Pending pod holds no GPU and is not billed.
- GPU time and cost are summed per pool: a replica's GPUs from its creation until it is
  gone, at its pool's price per GPU-hour (`PooledResult.pools`).
- A policy may give a pool a new batching: its pod template changes and the pool rolls as a
  Deployment does (maxSurge 1, maxUnavailable 0: a new pod at the cold start, an old one gone
  once the Ready pods stay at the pool's replicas without it), a step at each pod's readiness
  and each evaluation; the surge is billed like any pod (`FleetResult.rollouts`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot.core.errors import InvalidSpec
from tokenpilot_lab.fleet.config import FleetConfig
from tokenpilot_lab.fleet.policies.base import FleetPolicy
from tokenpilot_lab.fleet.pool_view import PoolsPolicy, PoolsView, PoolView
from tokenpilot_lab.fleet.results import FleetResult, Rollout, ScaleEvent
from tokenpilot_lab.fleet.simulator import FleetSimulation, ProgressFn, _Replica, roll_step
from tokenpilot_lab.fleet.view import FleetView
from tokenpilot_lab.sim import EngineConfig, StepTimer
from tokenpilot_lab.workload import Trace


@dataclass(frozen=True, slots=True)
class FleetPool:
    """One GPU pool: its engines, its price, its Deployment's bounds and opening replicas, and
    when its nodes run out (None: never)."""

    sku: str
    label: str
    engine: EngineConfig
    timer: StepTimer
    usd_per_gpu_hour: float
    gpus_per_replica: int = 1
    min_replicas: int = 0
    max_replicas: int = 64
    initial_replicas: int = 0
    nodes_run_out_s: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise InvalidSpec(f"pool {self.sku}: need 0 <= min_replicas <= max_replicas")
        if not self.min_replicas <= self.initial_replicas <= self.max_replicas:
            raise InvalidSpec(f"pool {self.sku}: initial_replicas outside its bounds")
        if not self.usd_per_gpu_hour >= 0 or self.gpus_per_replica < 1:
            raise InvalidSpec(f"pool {self.sku}: price >= 0 and gpus_per_replica >= 1")


@dataclass(frozen=True, slots=True)
class PoolBill:
    """One pool's share of a run: GPU-hours, cost, and the most replicas it held at once."""

    sku: str
    gpu_hours: float
    cost_usd: float
    peak_replicas: int


@dataclass(frozen=True, slots=True)
class PooledResult:
    """A run on pools: the fleet's result (GPU-hours and cost summed over the pools) and each
    pool's bill."""

    result: FleetResult
    pools: tuple[PoolBill, ...]


class PooledFleetSimulation(FleetSimulation):
    """One run of one policy over pools; see the module docstring. Call `run()` once."""

    def __init__(
        self,
        trace: Trace,
        policy: PoolsPolicy,
        config: FleetConfig,
        pools: Sequence[FleetPool],
    ) -> None:
        if not pools:
            raise InvalidSpec("a pooled fleet needs at least one pool")
        # The base class reads only the policy's name, interval and source; `_evaluate`, the
        # one caller of `decide`, is this class's own.
        super().__init__(trace, cast(FleetPolicy, policy), config, pools[0].engine, pools[0].timer)
        self.pools = tuple(pools)
        self.pools_policy = policy
        self._pool_of: dict[int, int] = {}
        self._pool_by_name: dict[str, int] = {}
        self._pool_desired = [0] * len(self.pools)
        self._pool_peak = [0] * len(self.pools)
        # The rollout under way in each pool that has one: its index in `_rollouts`, and the
        # pod-seconds over the pool's replicas so far (with when they were counted to).
        self._pool_rolls: dict[int, tuple[int, float, float]] = {}

    # ----- fleet state ----------------------------------------------------------------------

    def _open(self) -> None:
        for i, pool in enumerate(self.pools):
            for _ in range(pool.initial_replicas):
                self._add(i, 0.0, 0.0)
            self._pool_desired[i] = pool.initial_replicas
            self._pool_peak[i] = pool.initial_replicas

    def _add(self, pool_index: int, created_s: float, ready_s: float) -> None:
        pool = self.pools[pool_index]
        out = pool.nodes_run_out_s
        placed = out is None or created_s < out or (created_s == 0.0 and ready_s == 0.0)
        replica = _Replica(
            len(self._replicas),
            pool.engine,
            pool.timer,
            self._edges,
            created_s,
            ready_s if placed else math.inf,
        )
        self._pool_of[replica.index] = pool_index
        self._pool_by_name[replica.name] = pool_index
        self._replicas.append(replica)
        self._live.append(replica)
        if placed and ready_s > created_s:
            self._starting.append(replica)

    def _spec_replicas(self) -> int:
        return sum(self._pool_desired)

    def _pool_pods(self, pool_index: int) -> list[_Replica]:
        return [r for r in self._pods() if self._pool_of[r.index] == pool_index]

    # ----- the policy -----------------------------------------------------------------------

    def _evaluate(self, now_s: float) -> None:
        policy = self.pools_policy
        if policy.source is MetricsSourceType.direct:
            self._scrape(now_s)
        view = PoolsView(
            fleet=self._view(now_s, self._pods(), self._spec_replicas(), None),
            pools=tuple(self._pool_view(i, now_s) for i in range(len(self.pools))),
            pod_pools={
                r.name: self.pools[self._pool_of[r.index]].label for r in self._serving(now_s)
            },
        )
        choice = policy.decide(view)
        before = self._spec_replicas()
        changed = False
        for i, (pool, wanted) in enumerate(zip(self.pools, choice.replicas, strict=True)):
            desired = max(pool.min_replicas, min(pool.max_replicas, wanted))
            if desired != self._pool_desired[i]:
                self._scale_pool(i, now_s, desired)
                changed = True
        if changed:
            self._events.append(ScaleEvent(now_s, before, self._spec_replicas(), choice.reason))
        for i, batching in enumerate(choice.batching):
            if batching is not None:
                self._retune_pool(i, now_s, batching)
        if self._pool_rolls:
            self._roll(now_s)

    def _view(
        self, now_s: float, pods: list[_Replica], spec: int, pool_index: int | None
    ) -> FleetView:
        """The view of `pods` (the fleet's, or one pool's): the pages as last scraped, of
        every pool or of that pool's pods."""
        serving = [r for r in pods if r.ready_s <= now_s]
        return FleetView(
            now_s=now_s,
            scraped_at_s=self._last_scrape_s,
            spec_replicas=spec,
            num_ready=len(serving),
            num_starting=len(pods) - len(serving),
            pods={
                name: page
                for name, page in self._last_pods.items()
                if pool_index is None or self._pool_by_name[name] == pool_index
            },
            pod_startups_s={
                r.name: r.ready_s - r.created_s for r in serving if r.ready_s > r.created_s
            },
            batching={
                r.name: (r.config.max_num_batched_tokens, r.config.max_num_seqs) for r in serving
            },
        )

    def _pool_view(self, pool_index: int, now_s: float) -> PoolView:
        pool = self.pools[pool_index]
        pods = self._pool_pods(pool_index)
        pending = [r.created_s for r in pods if r.ready_s == math.inf]
        return PoolView(
            sku=pool.sku,
            label=pool.label,
            view=replace(
                self._view(now_s, pods, self._pool_desired[pool_index], pool_index),
                rolling_out=pool_index in self._pool_rolls,
            ),
            unschedulable_for_s=now_s - min(pending) if pending else None,
        )

    def _scale_pool(self, pool_index: int, now_s: float, desired: int) -> None:
        spec = self._pool_desired[pool_index]
        self._pool_desired[pool_index] = desired
        self._pool_peak[pool_index] = max(self._pool_peak[pool_index], desired)
        if desired > spec:
            for _ in range(desired - spec):
                self._add(pool_index, now_s, now_s + self.config.cold_start_s)
            return
        # A ReplicaSet removes the pods that are not Ready first (Pending before starting),
        # then the newest; a rollout's old template before its new one.
        template = self.pools[pool_index].engine
        victims = sorted(
            self._pool_pods(pool_index),
            key=lambda r: (
                r.ready_s <= now_s,
                r.ready_s != math.inf,
                r.config is template,
                -r.created_s,
                -r.index,
            ),
        )
        for replica in victims[: spec - desired]:
            self._remove(replica, now_s)
        self._live = [r for r in self._live if r.ended_s is None]

    # ----- rollouts -------------------------------------------------------------------------

    def _retune_pool(self, pool_index: int, now_s: float, batching: tuple[int, int]) -> None:
        """The pool's pod template at `batching`, rolled out from now on."""
        pool = self.pools[pool_index]
        before = (pool.engine.max_num_batched_tokens, pool.engine.max_num_seqs)
        if before == batching:
            return
        engine = replace(pool.engine, max_num_batched_tokens=batching[0], max_num_seqs=batching[1])
        self.pools = tuple(
            replace(p, engine=engine) if i == pool_index else p for i, p in enumerate(self.pools)
        )
        if pool_index in self._pool_rolls:
            # A rollout superseded: it ends here, and the new one takes its pods on.
            self._end_roll(pool_index, now_s)
        self._rollouts.append(Rollout(now_s, None, before, batching))
        self._pool_rolls[pool_index] = (len(self._rollouts) - 1, 0.0, now_s)
        self._roll(now_s)

    def _roll(self, now_s: float) -> None:
        """One step of every pool's rollout at `now_s`."""
        for pool_index in list(self._pool_rolls):
            at, surge_s, since_s = self._pool_rolls[pool_index]
            over = len(self._pool_pods(pool_index)) - self._pool_desired[pool_index]
            self._pool_rolls[pool_index] = (at, surge_s + max(0, over) * (now_s - since_s), now_s)
            if self._roll_pool(pool_index, now_s):
                self._end_roll(pool_index, now_s)
        self._live = [r for r in self._live if r.ended_s is None]

    def _roll_pool(self, pool_index: int, now_s: float) -> bool:
        """The pool's Deployment rolled as far as it goes (`roll_step`); True once done."""
        return roll_step(
            lambda: self._pool_pods(pool_index),
            self.pools[pool_index].engine,
            self._pool_desired[pool_index],
            now_s,
            remove=lambda replica: self._remove(replica, now_s),
            add=lambda: self._add(pool_index, now_s, now_s + self.config.cold_start_s),
        )

    def _end_roll(self, pool_index: int, now_s: float) -> None:
        at, surge_s, _ = self._pool_rolls.pop(pool_index)
        gpus = self.pools[pool_index].gpus_per_replica
        self._rollouts[at] = replace(
            self._rollouts[at], finished_s=now_s, surge_gpu_hours=surge_s * gpus / 3600.0
        )

    # ----- the bill -------------------------------------------------------------------------

    def run_pooled(self, progress: ProgressFn | None = None) -> PooledResult:
        result = self.run(progress)
        end_s = max(self.trace.duration_s, self._last_finish_s)
        gpu_s = [0.0] * len(self.pools)
        for replica in self._replicas:
            if replica.ready_s == math.inf:
                continue  # Pending all its life: no GPU held
            stop_s = end_s if replica.ended_s is None else min(replica.ended_s, end_s)
            pool = self._pool_of[replica.index]
            gpu_s[pool] += max(0.0, stop_s - replica.created_s) * self.pools[pool].gpus_per_replica
        bills = tuple(
            PoolBill(
                pool.sku,
                seconds / 3600.0,
                seconds / 3600.0 * pool.usd_per_gpu_hour,
                self._pool_peak[i],
            )
            for i, (pool, seconds) in enumerate(zip(self.pools, gpu_s, strict=True))
        )
        total = replace(
            result,
            gpu_hours=sum(b.gpu_hours for b in bills),
            cost_usd=sum(b.cost_usd for b in bills),
        )
        return PooledResult(total, bills)


def simulate_pools(
    trace: Trace,
    policy: PoolsPolicy,
    config: FleetConfig,
    pools: Sequence[FleetPool],
    progress: ProgressFn | None = None,
) -> PooledResult:
    """Replay `trace` through pools scaled by `policy`; see the module docstring."""
    return PooledFleetSimulation(trace, policy, config, pools).run_pooled(progress)
