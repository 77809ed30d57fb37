"""One service's plan inputs, resolved once: the GPU, the model's shape, the SLOs, what is known
of the workload and the deployment, and what fits in the GPU's memory.

Every plan reads the same value: the reconciler's choice of SKU and batching
(core.render_plan), the autoscaler's replica model (core.autoscale.spec), `tokenpilot plan` and
the fleet simulator (from their flags, commands/tuner_flags.py). `plan_inputs` builds it from an
LLMService spec, parsing each SLO once under the API's field name; `PlanInputs.of` from values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import (
    DEFAULT_BATCHING_PROFILE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_MODEL_LEN,
    DEFAULT_TENSOR_PARALLEL_SIZE,
    BatchingProfile,
    LLMServiceSpec,
)
from tokenpilot.api.model_shape import ModelShape
from tokenpilot.api.workload import PlannedFor
from tokenpilot.core.capacity import CapacityPlan, plan_capacity
from tokenpilot.core.durations import parse_duration_s


@dataclass(frozen=True, slots=True)
class ServiceLevel:
    """Latency targets; `strict` turns crossing bounds into `Infeasible`."""

    itl_p99_s: float | None
    ttft_p99_s: float | None
    strict: bool = False


@dataclass(frozen=True, slots=True)
class WorkloadHints:
    """What is known of the workload and the deployment; the defaults are the API's.

    `max_num_seqs` and `token_budget` are the spec's integers when it sets them."""

    prompt_p99_tokens: int | None = None
    expected_context_tokens: int | None = None
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    max_num_seqs: int | None = None
    token_budget: int | None = None
    objective: BatchingProfile = DEFAULT_BATCHING_PROFILE
    tensor_parallel_size: int = DEFAULT_TENSOR_PARALLEL_SIZE
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What every plan of one service on one GPU starts from. `capacity` is the KV cache one
    replica holds, planned at maxModelLen (`CapacityPlan.at_context` for another context)."""

    profile: GPUProfile
    shape: ModelShape
    slo: ServiceLevel
    hints: WorkloadHints
    capacity: CapacityPlan
    # The engines' measured pace per term (decode-only steps, the prefill beside them), which
    # the tuner prices steps at: the profile's (1, 1) until the engines have shown otherwise.
    step_costs: tuple[float, float] = (1.0, 1.0)

    @staticmethod
    def of(
        profile: GPUProfile, shape: ModelShape, slo: ServiceLevel, hints: WorkloadHints
    ) -> PlanInputs:
        """The inputs, with the capacity planned; the planner's errors (InvalidSpec,
        Infeasible naming needed and available GiB) when the model cannot run there."""
        capacity = plan_capacity(
            profile,
            shape,
            hints.tensor_parallel_size,
            hints.gpu_memory_utilization,
            hints.max_model_len,
        )
        return PlanInputs(profile, shape, slo, hints, capacity)


def service_level(spec: LLMServiceSpec) -> ServiceLevel:
    """spec.slo in seconds, each parsed under its field's name."""
    slo = spec.slo
    return ServiceLevel(
        itl_p99_s=None if slo.itl_p99 is None else parse_duration_s(slo.itl_p99, "spec.slo.itlP99"),
        ttft_p99_s=(
            None if slo.ttft_p99 is None else parse_duration_s(slo.ttft_p99, "spec.slo.ttftP99")
        ),
    )


def plan_inputs(spec: LLMServiceSpec, profile: GPUProfile) -> PlanInputs:
    """The plan inputs of `spec` on `profile`: its SLOs, its engine's settings, the integers its
    batching sets (`auto` leaves them to the tuner) and the model's shape."""
    engine, batching = spec.engine, spec.batching
    budget, seqs = batching.max_num_batched_tokens, batching.max_num_seqs
    hints = WorkloadHints(
        max_model_len=engine.max_model_len,
        max_num_seqs=seqs if isinstance(seqs, int) else None,
        token_budget=budget if isinstance(budget, int) else None,
        objective=batching.profile,
        tensor_parallel_size=engine.tensor_parallel_size,
        gpu_memory_utilization=engine.gpu_memory_utilization,
    )
    return PlanInputs.of(profile, spec.model.shape.resolve(), service_level(spec), hints)


def with_workload(inputs: PlanInputs, planned: PlannedFor | None) -> PlanInputs:
    """`inputs` planned for `planned` (None: the API's defaults at the profile's price), its
    figures held within maxModelLen."""
    longest = inputs.hints.max_model_len
    prompt = None if planned is None else planned.prompt_tokens_p99
    context = None if planned is None else planned.mean_context_tokens
    hints = replace(
        inputs.hints,
        prompt_p99_tokens=None if prompt is None else min(longest, prompt),
        expected_context_tokens=None if context is None else min(longest, context),
    )
    costs = (1.0, 1.0) if planned is None else (planned.decode_step_factor, planned.prefill_factor)
    return replace(inputs, hints=hints, step_costs=costs)
