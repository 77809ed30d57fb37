"""`tokenpilot` on pools: the operator's autoscaler and its reconciler's pool plan, in virtual time.

What the operator does for an LLMService with `spec.accelerator.pools`, each evaluation:
1. The autoscaler (`core.autoscale.loop.step`) reads every pool's Ready pods (the Service's
   endpoints) and counts them in replicas of the first pool's capacity
   (`core.pools.ready_in_first_pool_units`, with each pool's capacity from `status.pools` and
   the routing the spec renders: a Service gives every pod an equal share, an InferencePool's
   endpoint picker weighs their load); its capacity model is the first pool's, priced at the
   batching the first pool's Ready pods run (as `runtime.service_loop` builds it). It writes
   spec.replicas, in those units.
2. The reconciler re-plans the service (`core.render_plan.plan`, which calls
   `core.pool_plan.plan_pools` and so `core.pools.split`) from its spec, the status the
   autoscaler wrote (the workload it learned feeds each pool's capacity figure) and the status
   the reconciler wrote last (each pool's capacity, its spill-over), with each pool's live
   Deployment replicas, Ready pods and oldest Unschedulable pod. Each pool's Deployment gets
   the replicas the split gives it.
Every pool's budget is planned once, at creation: the spec must say `batching.retune: Off`, as
the simulator rolls no pool Deployment (fleet.pool_simulator).

Nothing here reads the trace or the engines' timer: the spec, the GPU profiles, the nodes'
GPU labels and the pods' metrics are what the operator holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMService, LLMServiceStatus, MetricsSourceType, PoolStatus
from tokenpilot.api.workload import RetuneMode
from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.loop import ServiceState, step
from tokenpilot.core.autoscale.observation import Current, Now
from tokenpilot.core.autoscale.spec import (
    evaluation_interval_s,
    policy_from_spec,
    replica_model,
    running_batching,
)
from tokenpilot.core.autoscale.window import PodScrapes
from tokenpilot.core.plan_inputs import PlanInputs, plan_inputs
from tokenpilot.core.pool_plan import PoolLive, equal_share
from tokenpilot.core.pools import ready_in_first_pool_units
from tokenpilot.core.render import pool_label_value
from tokenpilot.core.render_plan import Plan, plan
from tokenpilot.core.retune import Tuning
from tokenpilot.core.sku import GPU_PRODUCT_LABEL, NodeFacts
from tokenpilot.core.status import tuning_status
from tokenpilot_lab.fleet.pool_view import UNSCHEDULABLE_MESSAGE, PoolsChoice, PoolsView

# Virtual time's wall clock (status timestamps, spill-over ages): this plus its seconds.
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def pool_nodes(profiles: Sequence[GPUProfile]) -> tuple[NodeFacts, ...]:
    """One node per pool's GPU, labelled as the GPU operator labels it: the cluster offers
    every pool's SKU (a pool whose nodes are full still has its nodes)."""
    return tuple(
        NodeFacts(
            name=f"{p.name.lower()}-nodes",
            labels={GPU_PRODUCT_LABEL: p.gpu_product_labels[0]},
            allocatable_gpus=8,
        )
        for p in profiles
    )


@dataclass
class PoolsOperator:
    """The operator's autoscaler and pool plan for one pooled LLMService; see the module
    docstring. Build with `PoolsOperator.created`."""

    service: LLMService
    by_name: Callable[[str], GPUProfile]
    by_product: Callable[[str], GPUProfile]
    nodes: tuple[NodeFacts, ...]
    first_inputs: PlanInputs
    tuning: Tuning
    sku_name: str
    pools_status: list[PoolStatus]
    state: ServiceState
    name: str = "tokenpilot"
    source: MetricsSourceType = MetricsSourceType.direct
    interval_s: float = field(init=False)
    _policies: dict[tuple[int, int], AutoscalePolicy] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.interval_s = self.state.interval_s

    @staticmethod
    def created(
        service: LLMService,
        by_name: Callable[[str], GPUProfile],
        by_product: Callable[[str], GPUProfile],
        opening: Mapping[str, int] | None = None,
    ) -> PoolsOperator:
        """The service as the reconciler first plans it, with `opening` replicas per pool
        label already Ready (a fleet cut from a longer day); spec.replicas their capacity."""
        if service.spec.batching.retune is not RetuneMode.Off:
            raise ValueError(
                "a pooled service here keeps the budgets it is created with: give it "
                "batching.retune Off (the simulator rolls no pool Deployment)"
            )
        profiles = [by_name(p.sku) for p in service.spec.accelerator.pools]
        nodes = pool_nodes(profiles)
        live = {label: PoolLive(n, n) for label, n in (opening or {}).items()}
        first = _plan(service, by_name, by_product, nodes, live, None)
        pods = [label for label, n in (opening or {}).items() for _ in range(n)]
        rates = [
            (pool_label_value(pp.status.sku), pp.status.requests_per_s_per_replica)
            for pp in first.pools
        ]
        replicas = ready_in_first_pool_units(pods, rates, equal_share=equal_share(service))
        service = service.model_copy(
            update={"spec": service.spec.model_copy(update={"replicas": max(1, replicas)})}
        )
        inputs = plan_inputs(service.spec, profiles[0])
        operator = PoolsOperator(
            service=service,
            by_name=by_name,
            by_product=by_product,
            nodes=nodes,
            first_inputs=inputs,
            tuning=first.tuning,
            sku_name=first.facts.sku_name,
            pools_status=[pp.status for pp in first.pools],
            state=ServiceState(AutoscalePolicy(), interval_s=evaluation_interval_s(service.spec)),
        )
        operator.state = replace(operator.state, policy=operator.policy(()))
        return operator

    @property
    def first_batching(self) -> tuple[int, int]:
        decision = self.tuning.decision
        return decision.token_budget, decision.max_num_seqs

    def policy(self, first_pool_batching: Sequence[tuple[int, int] | None]) -> AutoscalePolicy:
        """The autoscaler's policy: the first pool's capacity model, at the batching most of
        that pool's Ready pods run (the tuning's before any is Ready)."""
        batching = running_batching(first_pool_batching) or self.first_batching
        policy = self._policies.get(batching)
        if policy is None:
            model = replica_model(self.first_inputs, *batching)
            policy = self._policies[batching] = policy_from_spec(self.service.spec, model)
        return policy

    def decide(self, view: PoolsView) -> PoolsChoice:
        now = _now(view.fleet.now_s)
        observed = self._observed()
        first_label = view.pools[0].label
        first_batching = [
            b for name, b in view.fleet.batching.items() if view.pod_pools.get(name) == first_label
        ]
        self.state = replace(self.state, policy=self.policy(first_batching))
        scrapes = PodScrapes(
            at_s=view.fleet.scraped_at_s,
            samples=view.fleet.pods,
            num_pods_expected=view.fleet.num_ready,
        )
        rates = [(pool_label_value(s.sku), s.requests_per_s_per_replica) for s in self.pools_status]
        current = Current(
            spec_replicas=observed.spec.replicas,
            ready_replicas=ready_in_first_pool_units(
                view.ready_pools, rates, equal_share=equal_share(observed)
            ),
            pod_startups_s=view.fleet.pod_startups_s,
        )
        self.state, decision, _ = step(self.state, scrapes, current, now)
        # The scale subresource: the autoscaler writes spec.replicas; the reconciler re-plans.
        spec = observed.spec.model_copy(update={"replicas": decision.desired_replicas})
        self.service = self.service.model_copy(update={"spec": spec})
        live = {
            pv.label: PoolLive(
                replicas=pv.view.spec_replicas,
                ready=pv.view.num_ready,
                unschedulable_for_s=pv.unschedulable_for_s,
                scheduler_message="" if pv.unschedulable_for_s is None else UNSCHEDULABLE_MESSAGE,
            )
            for pv in view.pools
        }
        planned = _plan(self._observed(), self.by_name, self.by_product, self.nodes, live, now.wall)
        self.pools_status = [pp.status for pp in planned.pools]
        shares = tuple(pp.share.replicas for pp in planned.pools)
        why = "; ".join(
            f"{pp.status.sku} {pp.share.replicas}: {pp.share.reason}" for pp in planned.pools
        )
        return PoolsChoice(shares, f"{decision.reason} -> {decision.desired_replicas}; {why}")

    def _observed(self) -> LLMService:
        """The service as the reconciler reads it: the autoscaler's part of status, the
        reconciler's tuning and pools."""
        owned: dict[str, Any] = dict(self.state.applied or {})
        owned["tuning"] = tuning_status(self.tuning, self.sku_name).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        owned["pools"] = [
            s.model_dump(by_alias=True, mode="json", exclude_none=True) for s in self.pools_status
        ]
        status = LLMServiceStatus.model_validate(owned)
        return self.service.model_copy(update={"status": status})


def _plan(
    service: LLMService,
    by_name: Callable[[str], GPUProfile],
    by_product: Callable[[str], GPUProfile],
    nodes: tuple[NodeFacts, ...],
    live: Mapping[str, PoolLive],
    wall: str | None,
) -> Plan:
    """The reconciler's plan of the service as it stands (no ServiceMonitor: direct metrics)."""
    return plan(
        service,
        nodes=nodes,
        by_name=by_name,
        by_product=by_product,
        service_monitor_served=False,
        now=wall,
        pools_live=live,
    )


def _now(virtual_s: float) -> Now:
    wall = (_EPOCH + timedelta(seconds=virtual_s)).isoformat().replace("+00:00", "Z")
    return Now(virtual_s, wall)
