"""An LLMService turned into an AutoscalePolicy, the evaluation interval, and one replica as
the step model prices it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tokenpilot.api.llmservice import LLMServiceSpec
from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.autoscale.policy import AutoscalePolicy
from tokenpilot.core.durations import parse_duration_s
from tokenpilot.core.plan_inputs import PlanInputs, service_level
from tokenpilot.core.steptime import step_time_model

# An observation older than this many intervals is stale.
STALE_AFTER_INTERVALS = 3


def evaluation_interval_s(spec: LLMServiceSpec) -> float:
    """spec.autoscaling.interval in seconds (InvalidSpec naming the field if misspelt)."""
    return parse_duration_s(spec.autoscaling.interval, "spec.autoscaling.interval")


def replica_model(inputs: PlanInputs, token_budget: int, max_num_seqs: int) -> ReplicaModel:
    """One replica of this service at a budget and max_num_seqs: the GPU's step model, the KV
    cache the capacity planner found, the SLOs."""
    return ReplicaModel(
        pricer=step_time_model(inputs.profile, inputs.shape, inputs.hints.tensor_parallel_size),
        token_budget=token_budget,
        max_num_seqs=max_num_seqs,
        num_kv_tokens=inputs.capacity.num_kv_blocks * inputs.capacity.block_size,
        itl_slo_s=inputs.slo.itl_p99_s,
        ttft_slo_s=inputs.slo.ttft_p99_s,
    )


def running_batching(batchings: Iterable[tuple[int, int] | None]) -> tuple[int, int] | None:
    """The (budget, max_num_seqs) most of the Ready pods run, from each pod's (None: not
    known); the smaller budget on a tie, so the fleet is priced at the capacity it surely has.
    During a re-tune's rollout the budget coming is not yet the one most engines run."""
    seen = Counter(b for b in batchings if b is not None)
    if not seen:
        return None
    return max(seen.items(), key=lambda item: (item[1], -item[0][0]))[0]


def policy_from_spec(spec: LLMServiceSpec, model: ReplicaModel | None = None) -> AutoscalePolicy:
    """The policy the operator evaluates for this spec; InvalidSpec if it cannot be built.

    The API sets bounds, the queue target, both windows and the interval; the SLOs come from
    spec.slo. Everything else keeps AutoscalePolicy's documented defaults, except that a
    scale-down window shorter than the default step interval also shortens the step interval
    (a user asking for a 30 s window expects minReplicas soon after it, not 30 s per replica
    on top).
    """
    scaling, slo = spec.autoscaling, service_level(spec)
    interval_s = evaluation_interval_s(spec)
    down_window_s = parse_duration_s(
        scaling.scale_down_stabilization, "spec.autoscaling.scaleDownStabilization"
    )
    defaults = AutoscalePolicy()
    policy = AutoscalePolicy(
        min_replicas=scaling.min_replicas,
        max_replicas=scaling.max_replicas,
        target_queue_per_replica=scaling.target_queue_depth_per_replica,
        itl_p99_slo_s=slo.itl_p99_s,
        ttft_p99_slo_s=slo.ttft_p99_s,
        scale_up_stabilization_s=parse_duration_s(
            scaling.scale_up_stabilization, "spec.autoscaling.scaleUpStabilization"
        ),
        scale_down_stabilization_s=down_window_s,
        scale_down_step_interval_s=min(defaults.scale_down_step_interval_s, down_window_s),
        max_observation_age_s=max(
            defaults.max_observation_age_s, STALE_AFTER_INTERVALS * interval_s
        ),
        attainment=spec.slo.attainment,
        replica_model=model,
    )
    return policy
