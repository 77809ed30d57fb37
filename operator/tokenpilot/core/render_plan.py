"""From an LLMService and the cluster's facts to everything `render` needs: the SKU, whether the
model fits it, the batching decision, and the manifests.

The steps, each pure and each able to refuse with a domain error:
  1. choose the SKU (`core.sku.choose_sku`), checking with the capacity planner that the
     weights and KV cache fit at the requested tensor parallelism: each candidate's plan
     inputs (core.plan_inputs) are resolved once;
  2. decide the batching once (`choose_batching`): integers in the spec win; `auto` asks the
     SLO tuner (`core.tuner.recommend`) with the chosen SKU's plan inputs;
  3. render.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMService
from tokenpilot.api.workload import PlannedFor, TuningBasis
from tokenpilot.core.autoscale.spec import replica_model
from tokenpilot.core.batching import BatchingDecision, spec_decision
from tokenpilot.core.disaggregation_plan import plan_disaggregated
from tokenpilot.core.errors import Infeasible
from tokenpilot.core.plan_inputs import PlanInputs, plan_inputs, with_workload
from tokenpilot.core.pool_plan import PoolLive, PoolPlan, plan_pools
from tokenpilot.core.render import RenderFacts, model_load_budget_s, render
from tokenpilot.core.retune import (
    Tuning,
    capacity_gain,
    gate_of,
    hinted_plan,
    observed_plan,
    settle,
    workload_mix,
)
from tokenpilot.core.routing import render_routing
from tokenpilot.core.sku import NodeFacts, SkuChoice, choose_sku
from tokenpilot.core.tuner import recommend


@dataclass(frozen=True)
class Plan:
    """The outcome of planning one service: what to apply and why. `sku` is the one SKU's
    choice (None with pools); `facts` the first pool's with pools, whose tuning
    status.tuning shows; `pools` each pool's plan."""

    sku: SkuChoice[GPUProfile] | None
    facts: RenderFacts
    manifests: list[dict[str, Any]]
    tuning: Tuning
    pools: tuple[PoolPlan, ...] = ()


def weights_fit(
    service: LLMService, profile: GPUProfile, planned: dict[str, PlanInputs] | None = None
) -> str | None:
    """None when the capacity planner fits the model on `profile` at the spec's tensor
    parallelism (its plan inputs kept in `planned`, by SKU), else its explanation (needed vs
    available GiB, and what to change)."""
    try:
        inputs = plan_inputs(service.spec, profile)
    except Infeasible as exc:
        return f"{service.spec.model.name} on {profile.name}: {exc}"
    if planned is not None:
        planned[profile.name] = inputs
    return None


def choose_batching(inputs: PlanInputs) -> BatchingDecision:
    """The batching decision for these inputs: the spec's integers win; `auto` takes the SLO
    tuner's answer."""
    hints = inputs.hints
    if hints.token_budget is not None and hints.max_num_seqs is not None:
        return spec_decision(hints.token_budget, hints.max_num_seqs)
    return recommend(inputs).decision


def tuned(service: LLMService, inputs: PlanInputs, now: str | None) -> Tuning:
    """The budget the engines run, planned for the workload status.tuning says, and whether the
    workload they served moves them to another (core.retune)."""
    spec, status = service.spec, service.status
    if inputs.hints.token_budget is not None and inputs.hints.max_num_seqs is not None:
        return Tuning(choose_batching(inputs), TuningBasis.spec, None)

    def tune(planned: PlannedFor | None) -> BatchingDecision:
        return choose_batching(with_workload(inputs, planned))

    def gain(running: BatchingDecision, candidate: BatchingDecision) -> tuple[float, str | None]:
        mix = None if status.workload is None else workload_mix(status.workload)
        if mix is None:
            return 1.0, None
        return capacity_gain(
            replica_model(inputs, running.token_budget, running.max_num_seqs),
            replica_model(inputs, candidate.token_budget, candidate.max_num_seqs),
            mix,
        )

    return settle(
        spec.batching,
        status.tuning,
        hinted_plan(spec.workload),
        observed_plan(status.workload, status.engine_costs),
        tune=tune,
        gain=gain,
        gate=gate_of(service, status.autoscaling, now),
        now=now or "",
    )


def plan(
    service: LLMService,
    *,
    nodes: Sequence[NodeFacts],
    by_name: Callable[[str], GPUProfile],
    by_product: Callable[[str], GPUProfile],
    service_monitor_served: bool,
    now: str | None = None,
    pools_live: Mapping[str, PoolLive] | None = None,
) -> Plan:
    """Plan one service. Raises InvalidSpec, UnknownGPU or Infeasible. `now` (RFC 3339) lets a
    re-tune happen; without it the engines keep the budget they run. `pools_live`: what the
    cluster shows of each pool (spec.accelerator.pools), by SKU. A disaggregated service's
    two pools are planned by core.disaggregation_plan (the prefill chunk re-tuned as the
    budget of one pool is)."""
    spec = service.spec
    if spec.disaggregation is not None:
        return _of_pools(
            service,
            *plan_disaggregated(
                service, by_name=by_name, service_monitor_served=service_monitor_served, now=now
            ),
        )
    if spec.accelerator.pools:
        return _of_pools(
            service,
            *plan_pools(
                service,
                nodes=nodes,
                by_name=by_name,
                live=pools_live or {},
                tune_first=lambda inputs: tuned(service, inputs, now),
                choose=choose_batching,
                service_monitor_served=service_monitor_served,
                now=now,
            ),
        )
    # Each candidate SKU's inputs, planned once: the fit check and the batching read the same.
    planned: dict[str, PlanInputs] = {}
    sku = choose_sku(
        spec.accelerator.sku,
        nodes=nodes,
        gpus_per_replica=spec.gpus_per_replica,
        node_selector=spec.accelerator.node_selector,
        by_product=by_product,
        by_name=by_name,
        fits=lambda candidate: weights_fit(service, candidate, planned),
    )
    inputs = planned.get(sku.sku.name) or plan_inputs(spec, sku.sku)
    tuning = tuned(service, inputs, now)
    facts = RenderFacts(
        sku_name=sku.sku.name,
        gpu_product_labels=sku.product_labels,
        batching=tuning.decision,
        service_monitor_served=service_monitor_served,
        model_load_budget_s=model_load_budget_s(
            inputs.shape.weight_bytes, inputs.hints.tensor_parallel_size
        ),
    )
    manifests = render(service, facts) + routing_of(service)
    return Plan(sku=sku, facts=facts, manifests=manifests, tuning=tuning)


def _of_pools(service: LLMService, tuning: Tuning, pools: Sequence[PoolPlan]) -> Plan:
    """The plan of a service on several Deployments: each pool's, the first one's tuning in
    status.tuning, the Service and PDB over all of them, then the routing objects."""
    facts = [p.facts for p in pools]
    return Plan(
        sku=None,
        facts=facts[0],
        manifests=render(service, facts[0], facts) + routing_of(service),
        tuning=tuning,
        pools=tuple(pools),
    )


def routing_of(service: LLMService) -> list[dict[str, Any]]:
    """The routing objects spec.routing asks for, applied after the Service and the PDB."""
    return render_routing(service, service.spec.routing)
