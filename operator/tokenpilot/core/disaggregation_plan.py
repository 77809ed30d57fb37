"""Planning a service with spec.disaggregation: a prefill pool and a decode pool, each its own
GPU, tensor parallelism, batching and Deployment.

1. Each pool's plan inputs on its SKU's profile, at its tensor parallelism (the model must fit
   it: Infeasible names the pool).
2. The workload to plan for: what `status.tuning.plannedFor` says the running prefill chunk was
   planned for once it was re-tuned on an observed mix, else the spec's hints (its P99 prompt,
   the mean a `TAIL_PROMPT_FACTOR`-th of it), else the tuner's defaults (`planned_workload`).
   The mix the decode engines served moves the prefill chunk under the re-tune's rules
   (`prefill_tuning`).
3. Each pool's batching from `core.disaggregation.plan_phases`: the prefill pool's chunk, the
   decode pool at vLLM's floor; the integers a spec's batching sets win for both.
4. What each pool's Deployment renders beside the aggregated one (core.render): its role label
   (`llm-d.ai/role`, which the llm-d router's endpoint picker selects on), the engine's
   `--kv-transfer-config` (NIXL, producing on prefill and consuming on decode), NIXL's side
   channel, and on the decode pool the llm-d routing sidecar in front of the engine.
Each pool runs the replicas its `spec.disaggregation.<role>.replicas` gives it; with
spec.autoscaling.enabled the autoscaler sets those (runtime.phases_loop), sizing each pool with
`phase_scaling`: its replica model and policy at the budgets the engines run, for the mix the
pools are sized for, between the pool's bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import (
    BatchingSource,
    BoundKind,
    GpuPool,
    LLMService,
    PhasePool,
    PoolState,
    PoolStatus,
    SeqsSource,
)
from tokenpilot.api.workload import PlannedFor, TuningBasis, WorkloadStatus
from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.autoscale.demand import TAIL_PROMPT_FACTOR
from tokenpilot.core.autoscale.policy import AutoscalePolicy
from tokenpilot.core.autoscale.workload import MIN_REQUESTS
from tokenpilot.core.batching import BatchingDecision, Bound, spec_decision
from tokenpilot.core.disaggregation import (
    DEFAULT_KV_LINK,
    KV_ROLES,
    DisaggregationPlan,
    KvLink,
    PhaseWorkload,
    Verdict,
    at_batching,
    kv_transfer_config,
    phase_models,
    plan_phases,
    size_pools,
    verdict,
)
from tokenpilot.core.errors import Infeasible, InvalidSpec
from tokenpilot.core.plan_inputs import PlanInputs, plan_inputs
from tokenpilot.core.pool_plan import PoolPlan, pool_profile
from tokenpilot.core.pools import PoolShare
from tokenpilot.core.render import (
    PhaseRender,
    PoolRender,
    RenderFacts,
    model_load_budget_s,
    pool_label_value,
)
from tokenpilot.core.retune import (
    Tuning,
    capacity_gain,
    gate_of,
    settle,
    workload_mix,
)
from tokenpilot.core.tuner import DEFAULT_OUTPUT_TOKENS

ROLES = tuple(KV_ROLES)  # prefill, then decode


def phase_deployment_name(service: LLMService, role: str) -> str:
    return f"{service.metadata.name}-{role}"


def phase_pool_label(role: str, sku: str) -> str:
    """The pool label (core.render.POOL_LABEL) of one phase's pods."""
    return f"{role}-{pool_label_value(sku)}"


def _link(service: LLMService) -> KvLink:
    split = service.spec.disaggregation
    assert split is not None
    if split.kv_link_gbps is None:
        return DEFAULT_KV_LINK
    return KvLink(split.kv_link_gbps, "spec.disaggregation.kvLinkGbps")


def phase_inputs(
    service: LLMService, role: str, pool: PhasePool, profile: GPUProfile
) -> PlanInputs:
    """The service's plan inputs on one phase's GPU and tensor parallelism; Infeasible names
    the pool."""
    engine = service.spec.engine
    if pool.tensor_parallel_size is not None:
        engine = engine.model_copy(update={"tensor_parallel_size": pool.tensor_parallel_size})
    spec = service.spec.model_copy(update={"engine": engine})
    try:
        return plan_inputs(spec, profile)
    except Infeasible as exc:
        raise Infeasible(
            f"disaggregation.{role} {pool.sku}: {exc}; choose a larger GPU or more "
            "tensorParallelSize for it",
            detail=exc.detail,
        ) from None


def split_inputs(
    service: LLMService, by_name: Callable[[str], GPUProfile]
) -> tuple[PlanInputs, PlanInputs]:
    """Each pool's plan inputs on its GPU profile, prefill first; UnknownGPU and Infeasible
    name the pool."""
    split = service.spec.disaggregation
    assert split is not None
    prefill, decode = (
        phase_inputs(
            service,
            role,
            pool,
            pool_profile(by_name, f"disaggregation.{role} {pool.sku}", pool.sku),
        )
        for role, pool in zip(ROLES, split.pools, strict=True)
    )
    return prefill, decode


def hinted_workload(service: LLMService) -> tuple[PhaseWorkload, TuningBasis]:
    """The mix to plan the pools for before any is observed: the spec's P99 prompt hint, or the
    tuner's defaults."""
    hints = _hinted_plan(service)
    return planned_workload(hints), TuningBasis.defaults if hints is None else TuningBasis.hints


def running_workload(service: LLMService) -> PhaseWorkload:
    """The mix the running prefill chunk was planned for (status.tuning.plannedFor when it was
    re-tuned on an observed one), else the hinted one."""
    tuning = service.status.tuning
    if tuning is not None and tuning.basis is TuningBasis.observed:
        return planned_workload(tuning.planned_for)
    return hinted_workload(service)[0]


def planned_workload(planned: PlannedFor | None) -> PhaseWorkload:
    """The mix a plan names: its means and P99 prompt where it has them (an observed plan), its
    P99 prompt alone (the spec's hint: the mean a `TAIL_PROMPT_FACTOR`-th of it), else the
    tuner's defaults."""
    if planned is None or planned.prompt_tokens_p99 is None:
        return PhaseWorkload.planned(None)
    p99 = planned.prompt_tokens_p99
    mean = float(planned.mean_prompt_tokens or max(1.0, p99 / TAIL_PROMPT_FACTOR))
    output = float(planned.mean_output_tokens or DEFAULT_OUTPUT_TOKENS)
    return PhaseWorkload(mean, max(p99, math.ceil(mean)), output)


def _hinted_plan(service: LLMService) -> PlannedFor | None:
    hint = service.spec.workload.prompt_tokens_p99
    return None if hint is None else PlannedFor(prompt_tokens_p99=hint)


def observed_phase_plan(decode: WorkloadStatus | None) -> PlannedFor | None:
    """What the decode engines served (they see every request's whole prompt and output), as
    what to plan the pools for, once it rests on `MIN_REQUESTS`: the mean prompt and output,
    the P99 prompt at its bucket's upper edge. The split's plans price steps at the profile's
    rates: its learned step costs are not folded in."""
    if (
        decode is None
        or decode.requests < MIN_REQUESTS
        or decode.prompt_tokens is None
        or decode.output_tokens is None
    ):
        return None
    mean = max(1, round(decode.prompt_tokens.mean))
    context = decode.mean_context_tokens
    return PlannedFor(
        prompt_tokens_p99=max(mean, round(decode.prompt_tokens.p99)),
        mean_context_tokens=None if context is None else max(1, round(context)),
        mean_prompt_tokens=mean,
        mean_output_tokens=max(1, round(decode.output_tokens.mean)),
    )


def prefill_tuning(
    service: LLMService, inputs: tuple[PlanInputs, PlanInputs], link: KvLink, now: str | None
) -> Tuning:
    """The prefill pool's chunk, planned for what status.tuning says it was planned for, and
    whether the mix the decode engines served moves it (core.retune.settle, as an aggregated
    service's budget: material at `MATERIAL_GAIN` times the prefill pool's load per replica
    within the TTFT it is left, gated by retuneCooldown, the prefill pool's scaling and a
    rollout under way). `inputs` are the pools' plan inputs as the spec gives them (not at the
    running batching); `link` the KV link the plan prices. Without `now` the engines keep the
    chunk they run."""
    spec, status = service.spec, service.status
    measured = inputs[0].profile.measured is not None

    def tune(planned: PlannedFor | None) -> BatchingDecision:
        phased = plan_phases(inputs[0], inputs[1], planned_workload(planned), link)
        words = phased.prefill.words
        if phased.problem is not None:
            words = f"{words}; {phased.problem}"
        return _decision(
            "prefill", phased.prefill.token_budget, phased.prefill.max_num_seqs, words, measured
        )

    phases = status.phases
    decode = None if phases is None or phases.decode is None else phases.decode.workload
    observed = observed_phase_plan(decode)

    def gain(running: BatchingDecision, candidate: BatchingDecision) -> tuple[float, str | None]:
        mix = None if decode is None else workload_mix(decode)
        if mix is None or observed is None:
            return 1.0, None
        before, after = (
            _prefill_model(inputs, b, planned_workload(observed), link)
            for b in (running, candidate)
        )
        return capacity_gain(before, after, mix)

    prefill = None if phases is None or phases.prefill is None else phases.prefill.autoscaling
    return settle(
        spec.batching,
        status.tuning,
        _hinted_plan(service),
        observed,
        tune=tune,
        gain=gain,
        gate=gate_of(service, prefill, now),
        now=now or "",
    )


def _prefill_model(
    inputs: tuple[PlanInputs, PlanInputs],
    batching: BatchingDecision,
    workload: PhaseWorkload,
    link: KvLink,
) -> ReplicaModel:
    """The prefill pool's replica model at `batching`, for `workload`."""
    prefill = at_batching(inputs[0], batching.token_budget, batching.max_num_seqs)
    return phase_models(prefill, inputs[1], plan_phases(prefill, inputs[1], workload, link))[0]


def plan_disaggregated(
    service: LLMService,
    *,
    by_name: Callable[[str], GPUProfile],
    service_monitor_served: bool,
    now: str | None = None,
) -> tuple[Tuning, list[PoolPlan]]:
    """The prefill pool's tuning (what status.tuning shows: `prefill_tuning`, or the spec's
    integers for both pools) and both pools' plans, prefill first; `now` lets the prefill chunk
    be re-tuned. Raises UnknownGPU or Infeasible naming the pool."""
    split = service.spec.disaggregation
    assert split is not None
    inputs = split_inputs(service, by_name)
    budget, seqs = service.spec.batching.max_num_batched_tokens, service.spec.batching.max_num_seqs
    if isinstance(budget, int) and isinstance(seqs, int):
        given = spec_decision(budget, seqs)
        tuning = Tuning(given, TuningBasis.spec, None)
    else:
        given = None
        tuning = prefill_tuning(service, inputs, _link(service), now)
    phased = plan_phases(
        at_batching(inputs[0], tuning.decision.token_budget, tuning.decision.max_num_seqs),
        inputs[1],
        planned_workload(tuning.planned_for),
        _link(service),
    )
    decode = given or _decision(
        "decode",
        phased.decode.token_budget,
        phased.decode.max_num_seqs,
        phased.decode.words,
        inputs[1].profile.measured is not None,
    )
    plans = []
    for role, pool, pool_in, phase, decision in zip(
        ROLES,
        split.pools,
        inputs,
        (phased.prefill, phased.decode),
        (tuning.decision, decode),
        strict=True,
    ):
        profile = pool_in.profile
        gpus = pool_in.hints.tensor_parallel_size
        deployment = phase_deployment_name(service, role)
        facts = RenderFacts(
            sku_name=profile.name,
            gpu_product_labels=tuple(sorted(profile.gpu_product_labels)),
            batching=decision,
            service_monitor_served=service_monitor_served,
            model_load_budget_s=model_load_budget_s(pool_in.shape.weight_bytes, gpus),
            pool=PoolRender(
                sku=pool.sku,
                deployment=deployment,
                label=phase_pool_label(role, pool.sku),
                replicas=pool.replicas,
                gpus_per_replica=gpus,
                node_selector=dict(pool.node_selector),
                phase=PhaseRender(
                    role=role,
                    tensor_parallel_size=gpus,
                    kv_transfer_config=kv_transfer_config(role),
                    sidecar_image=split.routing_sidecar_image if role == "decode" else None,
                ),
            ),
        )
        reason = phase.words if phased.problem is None else f"{phase.words}; {phased.problem}"
        status = PoolStatus(
            sku=pool.sku,
            role=role,
            deployment=deployment,
            replicas=pool.replicas,
            max_num_batched_tokens=decision.token_budget,
            max_num_seqs=decision.max_num_seqs,
            state=PoolState.Serving if pool.replicas else PoolState.Idle,
            reason=reason,
        )
        plans.append(
            PoolPlan(
                GpuPool(
                    sku=pool.sku, min_replicas=pool.replicas, max_replicas=max(1, pool.replicas)
                ),
                facts,
                PoolShare(pool.sku, pool.replicas, "spec.disaggregation"),
                status,
            )
        )
    return tuning, plans


@dataclass(frozen=True, slots=True)
class PhaseScaling:
    """What the autoscaler sizes a disaggregated service's pools with, prefill first: each
    pool's pod label, and its policy (replica model, bounds, SLO) for the mix `plan` is for."""

    labels: tuple[str, str]
    policies: tuple[AutoscalePolicy, AutoscalePolicy]
    plan: DisaggregationPlan


def phase_bounds(service: LLMService) -> tuple[tuple[int, int], tuple[int, int]]:
    """Each pool's (min, max) replicas: its own, else spec.autoscaling's."""
    split, scaling = service.spec.disaggregation, service.spec.autoscaling
    assert split is not None
    bounds = []
    for role, pool in zip(ROLES, split.pools, strict=True):
        low = scaling.min_replicas if pool.min_replicas is None else pool.min_replicas
        high = scaling.max_replicas if pool.max_replicas is None else pool.max_replicas
        if low > high:
            raise InvalidSpec(
                f"spec.disaggregation.{role}: minReplicas {low} > maxReplicas {high} (the one "
                "not set on the pool comes from spec.autoscaling); set both on the pool"
            )
        bounds.append((low, high))
    return bounds[0], bounds[1]


def phase_scaling(
    service: LLMService, *, by_name: Callable[[str], GPUProfile], workload: PhaseWorkload
) -> PhaseScaling:
    """Both pools' policies for `workload`, each priced at the batching its engines run (the
    reconciler's plan). Raises UnknownGPU, Infeasible or InvalidSpec naming the pool."""
    split = service.spec.disaggregation
    assert split is not None
    _, plans = plan_disaggregated(service, by_name=by_name, service_monitor_served=False)
    running = (p.facts.batching for p in plans)
    prefill, decode = (
        at_batching(inputs, b.token_budget, b.max_num_seqs)
        for inputs, b in zip(split_inputs(service, by_name), running, strict=True)
    )
    plan, policies = size_pools(
        service.spec, (prefill, decode), workload, _link(service), phase_bounds(service)
    )
    labels = (
        phase_pool_label("prefill", split.prefill.sku),
        phase_pool_label("decode", split.decode.sku),
    )
    return PhaseScaling(labels, policies, plan)


def phase_verdict(
    service: LLMService, *, by_name: Callable[[str], GPUProfile], workload: PhaseWorkload
) -> Verdict:
    """Whether the split pays for `workload`: its pools, each on its GPU, against one pool of
    the prefill pool's GPU at the engine's tensor parallelism, at the profiles' prices per
    GPU-hour (`core.disaggregation.verdict`)."""
    prefill, decode = split_inputs(service, by_name)
    aggregated = plan_inputs(service.spec, prefill.profile)
    prices = tuple(i.profile.hourly_cost_usd for i in (aggregated, prefill, decode))
    return verdict(aggregated, prefill, decode, workload, prices, _link(service))  # type: ignore[arg-type]


def _decision(
    role: str, token_budget: int, max_num_seqs: int, words: str, measured: bool
) -> BatchingDecision:
    """A phase's batching as the reconciler records it: the planned integers, what set them
    (the prefill chunk, or vLLM's floor of max_num_seqs for the decodes alone), and why."""
    return BatchingDecision(
        token_budget=token_budget,
        max_num_seqs=max_num_seqs,
        source=BatchingSource.measured_profile if measured else BatchingSource.datasheet_profile,
        set_by=Bound(
            BoundKind.prefill_chunk if role == "prefill" else BoundKind.max_num_seqs,
            token_budget,
            words,
        ),
        max_num_seqs_source=SeqsSource.vllm_default,
        max_num_seqs_words=f"vLLM's default for the GPU ({max_num_seqs})",
    )
