"""Planning a service with spec.accelerator.pools: each pool its own GPU, budget and replicas.

For each pool, in the spec's order:
  1. its plan inputs on its SKU's profile (the model must fit it: Infeasible names the pool);
  2. its budget: the first pool's is the service's tuning (`status.tuning`, re-tunes
     included); every other pool runs its own GPU's answer for the workload that tuning was
     planned for, so the pools move together when the workload is re-learned;
  3. what one replica serves within the SLOs at that budget, for the planned workload (the
     learned mix, else the planned prompt as mean and tail with the tuner's default output);
  4. its spill-over state from its pods (core.pools.spill_state).
Then `core.pools.split` gives each pool its replicas, for the routing the service has: its
Service gives every pod an equal share, an InferencePool's endpoint picker weighs their load. A
pool whose SKU no node offers is still rendered: its pods wait Unschedulable and spill over.
Only when no pool's SKU is on any node is the service Infeasible.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import GpuPool, LLMService, PoolState, PoolStatus
from tokenpilot.api.workload import PlannedFor
from tokenpilot.core.autoscale.capacity import Demand
from tokenpilot.core.autoscale.spec import replica_model
from tokenpilot.core.batching import BatchingDecision
from tokenpilot.core.durations import parse_duration_s, seconds_between
from tokenpilot.core.errors import Infeasible, UnknownGPU
from tokenpilot.core.plan_inputs import PlanInputs, plan_inputs, with_workload
from tokenpilot.core.pools import (
    PoolOffer,
    PoolShare,
    Spill,
    SpillFacts,
    pool_state,
    spill_state,
    split,
)
from tokenpilot.core.render import (
    POOL_LABEL,
    PoolRender,
    RenderFacts,
    model_load_budget_s,
    pool_deployment_name,
    pool_label_value,
)
from tokenpilot.core.retune import Tuning, servable_scale, workload_mix
from tokenpilot.core.sku import GPU_PRODUCT_LABEL, NodeFacts
from tokenpilot.core.tuner import DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS


@dataclass(frozen=True, slots=True)
class PoolLive:
    """What the cluster shows of one pool now (keyed by its pool label value): its Deployment's
    replicas and Ready ones, and its oldest Unschedulable pod (seconds it has been so, the
    scheduler's words)."""

    replicas: int = 0
    ready: int = 0
    unschedulable_for_s: float | None = None
    scheduler_message: str = ""


@dataclass(frozen=True)
class PoolPlan:
    """One pool as planned: what to render and what status.pools says of it."""

    pool: GpuPool
    facts: RenderFacts
    share: PoolShare
    status: PoolStatus


def planned_mix(inputs: PlanInputs, service: LLMService) -> Demand:
    """One request a second of the workload the pools are compared on: the learned mix when
    the engines have shown one, else the planned P99 prompt as mean and tail."""
    learned = None if service.status.workload is None else workload_mix(service.status.workload)
    if learned is not None:
        return learned
    prompt = float(inputs.hints.prompt_p99_tokens or DEFAULT_PROMPT_TOKENS)
    output = float(DEFAULT_OUTPUT_TOKENS)
    return Demand(prompt, output, prompt, output, prompt)


def pool_profile(by_name: Callable[[str], GPUProfile], where: str, sku: str) -> GPUProfile:
    """A pool's GPU profile; UnknownGPU says which field of the spec names it."""
    try:
        return by_name(sku)
    except UnknownGPU as exc:
        raise UnknownGPU(f"{where}: {exc}", how_to_add=exc.how_to_add) from None


def pool_inputs(service: LLMService, pool: GpuPool, profile: GPUProfile) -> PlanInputs:
    """The service's plan inputs on one pool's GPU; Infeasible names the pool."""
    try:
        return plan_inputs(service.spec, profile)
    except Infeasible as exc:
        raise Infeasible(
            f"accelerator.pools {pool.sku}: {exc}; remove the pool or choose a larger GPU",
            detail=exc.detail,
        ) from None


def plan_pools(
    service: LLMService,
    *,
    nodes: Sequence[NodeFacts],
    by_name: Callable[[str], GPUProfile],
    live: Mapping[str, PoolLive],
    tune_first: Callable[[PlanInputs], Tuning],
    choose: Callable[[PlanInputs], BatchingDecision],
    service_monitor_served: bool,
    now: str | None,
) -> tuple[Tuning, list[PoolPlan]]:
    """The first pool's tuning and every pool's plan, in the spec's order. Raises UnknownGPU
    or Infeasible (see the module doc)."""
    spec = service.spec
    pools = spec.accelerator.pools
    profiles = [pool_profile(by_name, f"accelerator.pools {pool.sku}", pool.sku) for pool in pools]
    offered = {p.name for p in profiles if _products_on_nodes(p, nodes)}
    if not offered:
        skus = ", ".join(pool.sku for pool in pools)
        raise Infeasible(
            f"no node offers a GPU of any of accelerator.pools ({skus}); add GPU nodes or a "
            "pool of a GPU the nodes have"
        )
    inputs = [
        pool_inputs(service, pool, profile) for pool, profile in zip(pools, profiles, strict=True)
    ]
    tuning = tune_first(inputs[0])
    planned: PlannedFor | None = tuning.planned_for
    decisions = [tuning.decision] + [choose(with_workload(i, planned)) for i in inputs[1:]]
    mix = planned_mix(with_workload(inputs[0], planned), service)
    after_s = parse_duration_s(
        spec.accelerator.spill_over.after, "spec.accelerator.spillOver.after"
    )
    retry_s = parse_duration_s(
        spec.accelerator.spill_over.retry_after, "spec.accelerator.spillOver.retryAfter"
    )
    previous = {p.sku: p for p in service.status.pools or ()}
    offers: list[PoolOffer] = []
    spills: list[Spill] = []
    for pool, pool_in, decision in zip(pools, inputs, decisions, strict=True):
        model = replica_model(
            with_workload(pool_in, planned), decision.token_budget, decision.max_num_seqs
        )
        rate = servable_scale(model, mix)
        gpus = pool.gpus_per_replica or spec.gpus_per_replica
        price = None if pool.price_per_gpu_hour is None else pool.price_per_gpu_hour * gpus
        seen = live.get(pool_label_value(pool.sku), PoolLive())
        before = previous.get(pool.sku)
        spilled_for = None
        if before is not None and before.state is PoolState.SpilledOver and before.spilled_since:
            spilled_for = None if now is None else seconds_between(before.spilled_since, now)
        spill = spill_state(
            SpillFacts(seen.unschedulable_for_s, seen.scheduler_message, spilled_for),
            after_s=after_s,
            retry_s=retry_s,
        )
        spills.append(spill)
        offers.append(
            PoolOffer(
                sku=pool.sku,
                requests_per_s_per_replica=rate if rate > 0 else None,
                price_per_replica_hour=price,
                min_replicas=pool.min_replicas,
                max_replicas=pool.max_replicas,
                replicas_now=seen.replicas,
                ready_now=seen.ready,
                spilled=spill.spilled,
            )
        )
    shares = split(spec.replicas, offers, equal_share=equal_share(service))
    plans = []
    for pool, pool_in, profile, decision, offer, share, spill in zip(
        pools, inputs, profiles, decisions, offers, shares, spills, strict=True
    ):
        gpus = pool.gpus_per_replica or spec.gpus_per_replica
        facts = RenderFacts(
            sku_name=profile.name,
            gpu_product_labels=tuple(sorted(profile.gpu_product_labels)),
            batching=decision,
            service_monitor_served=service_monitor_served,
            model_load_budget_s=model_load_budget_s(
                pool_in.shape.weight_bytes, pool_in.hints.tensor_parallel_size
            ),
            pool=PoolRender(
                sku=pool.sku,
                deployment=pool_deployment_name(service, pool.sku),
                label=pool_label_value(pool.sku),
                replicas=share.replicas,
                gpus_per_replica=gpus,
                node_selector=dict(pool.node_selector),
            ),
        )
        before = previous.get(pool.sku)
        since = because = None
        if spill.spilled:
            if spill.began or before is None:
                since, because = now, spill.reason
            else:
                since, because = before.spilled_since, before.spilled_because
        reason = share.reason if not spill.reason else f"{share.reason}; {spill.reason}"
        if because and because != spill.reason:
            reason += f" (spilled: {because})"
        if profile.name not in offered:
            reason += f"; no node offers {GPU_PRODUCT_LABEL} of {profile.name}"
        status = PoolStatus(
            sku=pool.sku,
            deployment=pool_deployment_name(service, pool.sku),
            replicas=share.replicas,
            ready_replicas=offer.ready_now,
            max_num_batched_tokens=decision.token_budget,
            max_num_seqs=decision.max_num_seqs,
            requests_per_s_per_replica=offer.requests_per_s_per_replica,
            price_per_replica_hour=offer.price_per_replica_hour,
            state=pool_state(spill.spilled, share.replicas),
            spilled_since=since,
            spilled_because=because,
            reason=reason,
        )
        plans.append(PoolPlan(pool, facts, share, status))
    return tuning, plans


def equal_share(service: LLMService) -> bool:
    """Whether the service's pods each get an equal share of its requests: behind its Service
    (a random pod per connection), not behind an InferencePool's endpoint picker."""
    return service.spec.routing.inference_pool is None


def _products_on_nodes(profile: GPUProfile, nodes: Sequence[NodeFacts]) -> bool:
    products = set(profile.gpu_product_labels)
    return any(node.gpu_product in products for node in nodes)


def observe_pools(
    deployments: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]], now: str
) -> dict[str, PoolLive]:
    """Each pool's PoolLive, by its pool label value, from the service's Deployments and its
    engine pods as the API server returns them (pods only matter while one is unplaced)."""
    out: dict[str, PoolLive] = {}
    for deployment in deployments:
        label = (deployment.get("metadata", {}).get("labels") or {}).get(POOL_LABEL)
        if label is None:
            continue
        status = deployment.get("status") or {}
        out[label] = PoolLive(
            replicas=int(deployment.get("spec", {}).get("replicas", 0)),
            ready=int(status.get("readyReplicas", 0)),
        )
    for pod in pods:
        meta = pod.get("metadata", {})
        label = (meta.get("labels") or {}).get(POOL_LABEL)
        if label is None or meta.get("deletionTimestamp"):
            continue
        scheduled = next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled"
            ),
            None,
        )
        if scheduled is None or scheduled.get("status") != "False":
            continue
        if scheduled.get("reason") != "Unschedulable":
            continue
        since = str(scheduled.get("lastTransitionTime") or meta.get("creationTimestamp") or "")
        waited = seconds_between(since, now) or 0.0
        seen = out.get(label, PoolLive())
        if seen.unschedulable_for_s is None or waited > seen.unschedulable_for_s:
            words = str(scheduled.get("message") or "").split(". ")[0].rstrip(".")
            out[label] = replace(seen, unschedulable_for_s=waited, scheduler_message=words)
    return out
