"""A disaggregated service's run on one trace: its two pools as the operator plans them, the
opening fleet, and the operator's autoscaler on each pool (fleet.phases_operator).

Each pool runs its GPU's step model at the budget `core.disaggregation.plan_phases` gives at
creation (the tuner's defaults: the spec has no hints; the prefill pool's chunk is re-tuned
later as the operator re-tunes it, fleet.phases_operator), the prefill pool with the prefix cache
as the flags say, the decode pool without (its prompts arrive computed), each billed at its
price. The hand-off is priced by `core.disaggregation.kv_transfer_s` over the link given.

The engines may differ from what the operator plans with, as the aggregated contenders' do:
an engine truth (`sim.truth`) prices both pools' steps, and `true_link` is the network the
hand-off really crosses; the operator still plans with the profiles and `link`.

Like every contender of the aggregated simulator, the fleet opens on what the trace's first
`OPENING_WINDOW_S` need: here each pool's capacity model sized for that window's mean load,
with the forecast's tail prompt (`core.autoscale.demand.TAIL_PROMPT_FACTOR` times the mean).
That opening is the one trace statistic the run is given, as the aggregated runs are given
theirs.

Both pools are picked by requests in flight (`Balancer.least_request`), whatever the fleet's
balancer: disaggregated serving needs a router that picks a prefill and a decode pod per
request (the llm-d router's prefill/decode selection behind an InferencePool), and that router
is an endpoint picker.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMServiceSpec
from tokenpilot.core.autoscale.capacity import Demand, ReplicaModel
from tokenpilot.core.autoscale.demand import TAIL_PROMPT_FACTOR
from tokenpilot.core.disaggregation import KvLink, kv_transfer_s, phase_models
from tokenpilot.core.plan_inputs import plan_inputs
from tokenpilot.core.render import pool_label_value
from tokenpilot.core.steptime import StepTimeModel, step_time_model
from tokenpilot_lab.fleet.config import Balancer, FleetConfig
from tokenpilot_lab.fleet.disagg_simulator import simulate_disaggregated
from tokenpilot_lab.fleet.phases_operator import PhasesOperator
from tokenpilot_lab.fleet.pool_simulator import FleetPool, PooledResult
from tokenpilot_lab.sim import EngineConfig, EngineTruth, ScaledPricer, StepTimer
from tokenpilot_lab.workload import Trace

OPENING_WINDOW_S = 300.0


@dataclass(frozen=True, slots=True)
class DisaggregatedRun:
    """The run's bill and what the operator planned and learned over it."""

    pooled: PooledResult
    operator: PhasesOperator
    pools: tuple[FleetPool, FleetPool]


def run_disaggregated(
    trace: Trace,
    fleet: FleetConfig,
    spec: LLMServiceSpec,
    profiles: tuple[GPUProfile, GPUProfile],
    usd_per_gpu_hour: tuple[float, float],
    bounds: tuple[tuple[int, int], tuple[int, int]],
    link: KvLink,
    *,
    tensor_parallel: tuple[int, int] = (1, 1),
    enable_prefix_caching: bool = True,
    truth: EngineTruth | None = None,
    engine_slowdown: float = 1.0,
    true_link: KvLink | None = None,
) -> DisaggregatedRun:
    """`trace` through a prefill pool on `profiles[0]` and a decode pool on `profiles[1]`, each
    replica of `tensor_parallel` GPUs, its engines priced by `truth` (and `engine_slowdown`
    times that) where given, the hand-off over `true_link` (default `link`)."""
    inputs = (
        plan_inputs(with_tensor_parallel(spec, tensor_parallel[0]), profiles[0]),
        plan_inputs(with_tensor_parallel(spec, tensor_parallel[1]), profiles[1]),
    )
    operator = PhasesOperator.created(spec, inputs, bounds, link)
    plan = operator.plan
    models = phase_models(*inputs, plan)
    opening = _opening(trace, models, bounds)
    shape = inputs[0].shape
    pools = tuple(
        FleetPool(
            sku=profile.name,
            label=f"{role}-{pool_label_value(profile.name)}",
            engine=EngineConfig.planned(
                phase_inputs.capacity,
                max_num_batched_tokens=phase.token_budget,
                max_num_seqs=phase.max_num_seqs,
                enable_prefix_caching=enable_prefix_caching and role == "prefill",
            ),
            timer=_engine_timer(step_time_model(profile, shape, tp), truth, engine_slowdown),
            usd_per_gpu_hour=price,
            gpus_per_replica=tp,
            min_replicas=low,
            max_replicas=high,
            initial_replicas=max(low, min(high, n)),
        )
        for role, profile, tp, phase_inputs, phase, price, (low, high), n in zip(
            ("prefill", "decode"),
            profiles,
            tensor_parallel,
            inputs,
            (plan.prefill, plan.decode),
            usd_per_gpu_hour,
            bounds,
            opening,
            strict=True,
        )
    )
    pooled = simulate_disaggregated(
        trace,
        operator,
        replace(fleet, balancer=Balancer.least_request),
        pools[0],
        pools[1],
        lambda prompt_tokens: kv_transfer_s(shape, prompt_tokens, true_link or link),
    )
    return DisaggregatedRun(pooled, operator, (pools[0], pools[1]))


def _engine_timer(model: StepTimeModel, truth: EngineTruth | None, slowdown: float) -> StepTimer:
    """What the engines' steps cost: the profile's model, under the truth, times the slowdown
    (as `tokenpilot simulate` prices its engines)."""
    timer = model if truth is None else truth.pricer(model)
    return timer if slowdown == 1.0 else ScaledPricer(timer, slowdown)


def with_tensor_parallel(spec: LLMServiceSpec, tensor_parallel_size: int) -> LLMServiceSpec:
    engine = spec.engine.model_copy(update={"tensor_parallel_size": tensor_parallel_size})
    return spec.model_copy(update={"engine": engine})


def _opening(
    trace: Trace,
    models: tuple[ReplicaModel, ReplicaModel],
    bounds: tuple[tuple[int, int], tuple[int, int]],
) -> tuple[int, int]:
    first = [r for r in trace.requests if r.arrival_s < OPENING_WINDOW_S]
    if not first:
        return bounds[0][0], bounds[1][0]
    span_s = min(OPENING_WINDOW_S, trace.duration_s) or OPENING_WINDOW_S
    prompt = sum(r.num_prompt_tokens for r in first)
    output = sum(r.num_output_tokens for r in first)
    mean_prompt = prompt / len(first)
    demand = Demand(
        prompt / span_s,
        output / span_s,
        mean_prompt,
        output / len(first),
        TAIL_PROMPT_FACTOR * mean_prompt,
    )
    (p_model, d_model), ((_, p_max), (_, d_max)) = models, bounds
    return p_model.replicas_needed(demand, p_max)[0], d_model.replicas_needed(demand, d_max)[0]
