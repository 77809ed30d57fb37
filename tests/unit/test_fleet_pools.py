"""The fleet on several GPU pools: each pool billed at its price, one balancer over every pool,
baselines per pool, the operator's split wired as the operator wires it, and spill-over when
a pool's nodes run out."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import grimp
from _llms import by_name, by_product, service
from _steps import LinearStep

from tokenpilot.api.llmservice import LLMService, PoolState
from tokenpilot.core.pool_plan import equal_share
from tokenpilot.core.pools import PoolOffer, split
from tokenpilot_lab.fleet import Balancer, FleetConfig
from tokenpilot_lab.fleet.policies import StaticPolicy
from tokenpilot_lab.fleet.pool_baselines import PerPoolPolicy, static_split
from tokenpilot_lab.fleet.pool_compare import planned_pools
from tokenpilot_lab.fleet.pool_operator import PoolsOperator
from tokenpilot_lab.fleet.pool_simulator import FleetPool, simulate_pools
from tokenpilot_lab.fleet.pool_view import PoolsChoice, PoolsView
from tokenpilot_lab.sim import EngineConfig
from tokenpilot_lab.workload import Trace, TraceRequest, poisson

TIMER = LinearStep()
ENGINE = EngineConfig(num_kv_blocks=20_000, max_num_batched_tokens=2048, max_num_seqs=256)
TRICKLE = Trace("trickle", tuple(TraceRequest(0.5 + i, 16, 2) for i in range(400)), 402.0)
PRICES = {"H100-80GB": 6.155, "L40S": 2.25}


def pool(sku: str, **fields: Any) -> FleetPool:
    fields.setdefault("usd_per_gpu_hour", 1.0)
    return FleetPool(sku=sku, label=sku.lower(), engine=ENGINE, timer=TIMER, **fields)


def fixed(*counts: int) -> PerPoolPolicy:
    return PerPoolPolicy(tuple(StaticPolicy(n) for n in counts), "fixed")


def test_a_two_pool_run_bills_each_pool_at_its_price() -> None:
    pools = [
        pool("a", usd_per_gpu_hour=4.0, gpus_per_replica=2, initial_replicas=1, max_replicas=4),
        pool("b", usd_per_gpu_hour=1.0, initial_replicas=2, max_replicas=4),
    ]
    run = simulate_pools(TRICKLE, fixed(1, 2), FleetConfig(), pools)
    hours = TRICKLE.duration_s / 3600.0
    a, b = run.pools
    assert (a.sku, b.sku) == ("a", "b")
    assert a.gpu_hours == 1 * 2 * hours and a.cost_usd == a.gpu_hours * 4.0
    assert b.gpu_hours == 2 * 1 * hours and b.cost_usd == b.gpu_hours * 1.0
    assert run.result.gpu_hours == a.gpu_hours + b.gpu_hours
    assert run.result.cost_usd == a.cost_usd + b.cost_usd
    assert run.result.num_met == TRICKLE.num_requests


@dataclass
class Watching:
    """A fixed split that keeps every view it was shown."""

    counts: tuple[int, ...]
    name: str = "watching"
    interval_s: float = 5.0
    source: Any = StaticPolicy(1).source
    views: list[PoolsView] = field(default_factory=list)

    def decide(self, view: PoolsView) -> PoolsChoice:
        self.views.append(view)
        return PoolsChoice(self.counts, "fixed")


def test_least_request_sends_to_the_pool_with_room() -> None:
    # Long requests that overlap: the one replica of the first pool takes the first, then every
    # arrival goes to a replica with fewer in flight, whichever pool it is in.
    burst = Trace("burst", tuple(TraceRequest(1.0 + i * 0.1, 16, 2000) for i in range(8)), 300.0)
    pools = [pool("a", initial_replicas=1, max_replicas=1), pool("b", initial_replicas=3)]
    policy = Watching((1, 3))
    fleet = FleetConfig(balancer=Balancer.least_request)
    simulate_pools(burst, policy, fleet, pools)
    last = policy.views[-1]
    served = {name: int(p.requests_total or 0) for name, p in last.fleet.pods.items()}
    assert sorted(served.values()) == [2, 2, 2, 2]
    by_pool = {label: 0 for label in ("a", "b")}
    for name, n in served.items():
        by_pool[last.pod_pools[name]] += n
    assert by_pool == {"a": 2, "b": 6}
    # Each pool's view holds its own pods only, the fleet's every pool's.
    assert [len(pv.view.pods) for pv in last.pools] == [1, 3]


def test_static_split_fills_the_cheapest_whole_load_first_and_spills_the_rest() -> None:
    # Alone at the peak: 4 replicas of a (4 x 5 = 20 an hour) or 10 of b (10 x 1 = 10).
    assert static_split([4, 10], [5.0, 1.0], [0, 0], [8, 16]) == [0, 10]
    # b capped at 6: it carries 6/10 of the load, a the remaining 0.4 x 4 = 1.6 -> 2.
    assert static_split([4, 10], [5.0, 1.0], [0, 0], [8, 6]) == [2, 6]


def pooled(**overrides: Any) -> LLMService:
    pools = [
        {"sku": sku, "maxReplicas": 16, "pricePerGpuHour": price} for sku, price in PRICES.items()
    ]
    return service(
        accelerator={"pools": pools, "spillOver": {"after": "30s", "retryAfter": "10m"}},
        slo={"ttftP99": "2s", "itlP99": "50ms"},
        autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 32},
        batching={"retune": "Off"},
        **overrides,
    )


@dataclass
class Recorder:
    """The operator, with what it was shown and answered at each evaluation."""

    operator: PoolsOperator
    seen: list[tuple[PoolsView, PoolsChoice, int, list[Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name, self.interval_s = self.operator.name, self.operator.interval_s
        self.source = self.operator.source

    def decide(self, view: PoolsView) -> PoolsChoice:
        choice = self.operator.decide(view)
        spec = self.operator.service.spec.replicas
        self.seen.append((view, choice, spec, list(self.operator.pools_status)))
        return choice


def operator_run(svc: LLMService, trace: Trace, **pool_fields: Any) -> tuple[Recorder, Any]:
    pools = planned_pools(svc, by_name, by_product, PRICES, **pool_fields)
    opened = (replace(pools[0], initial_replicas=1), *pools[1:])
    recorder = Recorder(PoolsOperator.created(svc, by_name, by_product, {pools[0].label: 1}))
    balancer = Balancer.service if equal_share(svc) else Balancer.least_request
    run = simulate_pools(trace, recorder, FleetConfig(balancer=balancer), opened)
    return recorder, run


def test_the_operators_per_pool_replicas_are_core_pools_split_of_the_same_inputs() -> None:
    svc = pooled()
    recorder, run = operator_run(svc, poisson(6.0, 300.0, seed=1))
    assert run.result.num_requests > 0 and len(recorder.seen) > 10
    bounds = svc.spec.accelerator.pools
    for view, choice, spec_replicas, statuses in recorder.seen:
        offers = [
            PoolOffer(
                sku=s.sku,
                requests_per_s_per_replica=s.requests_per_s_per_replica,
                price_per_replica_hour=s.price_per_replica_hour,
                min_replicas=b.min_replicas,
                max_replicas=b.max_replicas,
                replicas_now=pv.view.spec_replicas,
                ready_now=pv.view.num_ready,
                spilled=s.state is PoolState.SpilledOver,
            )
            for s, b, pv in zip(statuses, bounds, view.pools, strict=True)
        ]
        shares = split(spec_replicas, offers, equal_share=equal_share(svc))
        assert choice.replicas == tuple(s.replicas for s in shares)
    # The pools are priced: each status carries its price per replica-hour and capacity.
    assert [s.price_per_replica_hour for s in recorder.seen[-1][3]] == list(PRICES.values())


def test_a_pool_whose_nodes_run_out_spills_to_the_next() -> None:
    # The H100 pool is the cheaper capacity at these prices; its nodes are full from 1 s on, so
    # its new pods stay Pending, and 30 s later its share spills to the L40S pool.
    svc = pooled()
    recorder, run = operator_run(
        svc, poisson(12.0, 400.0, seed=2), nodes_run_out_s={"H100-80GB": 1.0}
    )
    h100, l40s = run.pools
    states = [statuses[0].state for _, _, _, statuses in recorder.seen]
    assert PoolState.SpilledOver in states
    first_spill = states.index(PoolState.SpilledOver)
    # It spilled at the first evaluation that found a pod Unschedulable for 30 s.
    pending_for = [v.pools[0].unschedulable_for_s for v, _, _, _ in recorder.seen]
    assert pending_for[first_spill] is not None and pending_for[first_spill] >= 30.0
    assert all(s is None or s < 30.0 for s in pending_for[:first_spill])
    assert l40s.peak_replicas > 0 and l40s.gpu_hours > 0
    # The H100 pool asked for more pods, but only the one placed before its nodes ran out held
    # a GPU: Pending pods are not billed.
    assert h100.peak_replicas > 1
    # One pod over the run (and its drain), not the Pending ones beside it.
    assert run.result.duration_s <= h100.gpu_hours * 3600.0 <= 1.25 * run.result.duration_s


def test_the_pool_operator_sees_neither_the_trace_nor_the_engines() -> None:
    graph = grimp.build_graph("tokenpilot_lab", "tokenpilot")
    for forbidden in ("tokenpilot_lab.sim", "tokenpilot_lab.workload", "tokenpilot_lab.traces"):
        chain = graph.find_shortest_chain(
            importer="tokenpilot_lab.fleet.pool_operator", imported=forbidden
        )
        assert chain is None, chain
