"""Prefill and decode apart: each phase's engines tuned for their own SLO on their own GPU, the
KV hand-off priced, and whether the split pays for a workload.

A disaggregated service runs two pools. A prefill engine computes a prompt's KV and first
token and hands the KV to a decode engine, which streams every token the client sees. So:

- **TTFT** = the prompt's prefill (its wait and its chunks) + the KV transfer (the model's KV
  bytes per token x the prompt, over the link between the two pods, at the link's line rate:
  a floor) + the decode engine's first step.
- **The prefill engines** run no decodes, so nothing but TTFT bounds their budget: it is the
  smallest chunk (doubling from max_num_seqs) that prefills the mean prompt within
  `PREFILL_CHUNK_TOLERANCE` of the time chunks of `PREFILL_BUDGET_CAP` tokens (or maxModelLen)
  take (`prefill_s`): a prompt's attention is the same however it is chunked, and past that a
  larger chunk saves only its share of weight reads and step overheads while lengthening the
  step a newly arrived prompt waits behind.
- **The decode engines** run no prefill chunk beside their decodes (a handed-off request
  computes only its last prompt token), so their steps are the decodes alone and their budget
  is vLLM's floor, max_num_seqs; how many decodes a replica carries is what the ITL and its KV
  cache allow at the workload's context.

The autoscaler sizes each pool with its phase's replica model (core.autoscale.capacity): the
prefill pool's with no ITL and the TTFT left after the hand-off, the decode pool's with the
ITL and prompts that arrive computed. `phase_models` gives both.

`verdict` compares, for one workload, what a request per second served within the SLOs costs
aggregated (one pool at the tuner's budget) and disaggregated (a prefill replica's share plus a
decode replica's share): where the aggregated budget cannot carry the tail prompt within the
TTFT beside decodes within the ITL (the tuner's bounds cross) and the split's pools can, the
split pays in attainment whatever it costs; otherwise it pays where it costs `SPLIT_MIN_GAIN`
times less.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from tokenpilot.api.llmservice import TENSOR_PARALLEL_SIZES, LLMServiceSpec
from tokenpilot.api.model_shape import ModelShape
from tokenpilot.api.vllm_defaults import vllm_batch_defaults
from tokenpilot.core.autoscale.capacity import KV_HEADROOM, Demand, ReplicaModel
from tokenpilot.core.autoscale.demand import TAIL_PROMPT_FACTOR
from tokenpilot.core.autoscale.policy import AutoscalePolicy
from tokenpilot.core.autoscale.spec import policy_from_spec, replica_model
from tokenpilot.core.autoscale.workload import MIN_REQUESTS, LearnedWorkload
from tokenpilot.core.capacity import BLOCK_SIZE
from tokenpilot.core.errors import Infeasible, InvalidSpec
from tokenpilot.core.plan_inputs import PlanInputs
from tokenpilot.core.retune import servable_scale
from tokenpilot.core.roofline import PrefillChunk, StepPricer
from tokenpilot.core.tuner import (
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    ITL_HEADROOM,
    largest_where,
    recommend,
)

# A prefill chunk may cost at most this much more per token than the largest chunk considered.
PREFILL_CHUNK_TOLERANCE = 0.05
# A learned figure this far from the one the pools are sized for re-sizes them (the re-tune's
# materiality).
REPLAN_CHANGE = 0.1
# The split is advised on cost alone only where it serves a request/s for this much less: two
# pools bring a second fleet to keep warm and a hand-off that can fail, which no price here
# counts (the re-tune's materiality, core.retune).
SPLIT_MIN_GAIN = 1.1
# The largest prefill chunk considered: at it a step's weight read is about 1 % of its time or
# less on every built-in GPU (Llama 3.1 8B: 0.3-1.2 %), so the price per token no longer falls.
PREFILL_BUDGET_CAP = 16384


@dataclass(frozen=True, slots=True)
class KvLink:
    """The network the KV travels over from a prefill pod to a decode pod: its line rate in
    gigabits per second, one direction, and where that figure comes from."""

    gbps: float
    source: str

    def __post_init__(self) -> None:
        if not (self.gbps > 0 and math.isfinite(self.gbps)):
            raise InvalidSpec(
                f"the KV link's rate must be a positive number of Gb/s, not {self.gbps}"
            )


# HGX H100/H200 systems give each GPU its own 400 Gb/s NIC for the GPU-to-GPU network between
# nodes (NVIDIA ConnectX-7, NDR InfiniBand; NVIDIA DGX H100 user guide, "networking").
DEFAULT_KV_LINK = KvLink(
    400.0,
    "one 400 Gb/s NDR InfiniBand NIC per GPU (NVIDIA ConnectX-7, as DGX/HGX H100 systems have)",
)


# The KV connector each pool's engines run: NIXL, the one vLLM ships for GPU-to-GPU transfer
# and the llm-d router's routing sidecar expects. In vLLM 0.32 it is an alias of
# NixlPullConnector: the decode engine reads the KV from the prefill engine.
KV_CONNECTOR = "NixlConnector"
# vLLM's kv_role per pool (vllm/config/kv_transfer.py); vLLM 0.32 warns that kv_both is
# deprecated with NIXL and asks for a producer on prefill and a consumer on decode.
KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}


def kv_transfer_config(role: str, connector: str = KV_CONNECTOR) -> str:
    """`vllm serve --kv-transfer-config` for the `role` pool's engines, as compact JSON."""
    if role not in KV_ROLES:
        raise InvalidSpec(f"a disaggregated pool is `prefill` or `decode`, not {role!r}")
    return json.dumps({"kv_connector": connector, "kv_role": KV_ROLES[role]}, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class PhaseWorkload:
    """The request mix a plan is made for: mean and P99 prompt, mean output, in tokens."""

    mean_prompt_tokens: float
    prompt_p99_tokens: int
    mean_output_tokens: float

    def __post_init__(self) -> None:
        if not (self.mean_prompt_tokens >= 1 and self.mean_output_tokens >= 1):
            raise InvalidSpec(
                "a workload needs a mean prompt and a mean output of at least 1 token"
            )
        if self.prompt_p99_tokens < self.mean_prompt_tokens:
            raise InvalidSpec(
                f"the P99 prompt ({self.prompt_p99_tokens} tokens) is under the mean prompt "
                f"({self.mean_prompt_tokens:.0f}); give a P99 at least the mean"
            )

    @staticmethod
    def planned(learned: LearnedWorkload | None) -> PhaseWorkload:
        """The mix to plan for: the learned one once it rests on `MIN_REQUESTS` requests (its
        P99 prompt the upper edge of its bucket), else the tuner's defaults (a P99 prompt of
        `DEFAULT_PROMPT_TOKENS`, its mean a `TAIL_PROMPT_FACTOR`-th of that, and
        `DEFAULT_OUTPUT_TOKENS` of output)."""
        if (
            learned is not None
            and learned.num_requests >= MIN_REQUESTS
            and learned.prompt is not None
            and learned.output is not None
        ):
            mean = max(1.0, learned.prompt.mean)
            return PhaseWorkload(
                mean, max(math.ceil(mean), round(learned.prompt.p99)), max(1.0, learned.output.mean)
            )
        return PhaseWorkload(
            DEFAULT_PROMPT_TOKENS / TAIL_PROMPT_FACTOR,
            DEFAULT_PROMPT_TOKENS,
            float(DEFAULT_OUTPUT_TOKENS),
        )

    def replanned(self, learned: LearnedWorkload | None) -> PhaseWorkload:
        """The mix to size the pools for, this being the one they are sized for: the learned
        one (`planned`) where it rests on `MIN_REQUESTS` requests and one of its figures moved
        by `REPLAN_CHANGE` or more, else this one, so the capacity models change on a material
        move and not with every evaluation's noise."""
        if (
            learned is None
            or learned.num_requests < MIN_REQUESTS
            or learned.prompt is None
            or learned.output is None
        ):
            return self
        seen = PhaseWorkload.planned(learned)
        pairs = (
            (self.mean_prompt_tokens, seen.mean_prompt_tokens),
            (self.prompt_p99_tokens, seen.prompt_p99_tokens),
            (self.mean_output_tokens, seen.mean_output_tokens),
        )
        moved = any(abs(b - a) >= REPLAN_CHANGE * a for a, b in pairs)
        return seen if moved else self

    def demand(self, requests_per_s: float) -> Demand:
        """This mix arriving at `requests_per_s`."""
        return Demand(
            self.mean_prompt_tokens * requests_per_s,
            self.mean_output_tokens * requests_per_s,
            self.mean_prompt_tokens,
            self.mean_output_tokens,
            float(self.prompt_p99_tokens),
        )


@dataclass(frozen=True, slots=True)
class PhasePlan:
    """One pool of a disaggregated service: its GPU, its engine's batching and the words why."""

    role: str  # "prefill" or "decode"
    gpu: str
    token_budget: int
    max_num_seqs: int
    words: str


@dataclass(frozen=True, slots=True)
class DisaggregationPlan:
    """Both pools' batching, the hand-off's price, the TTFT left to the prefill pool, and the
    longest prompt that can meet the TTFT at all (`longest_prompt_within`; None without one)."""

    prefill: PhasePlan
    decode: PhasePlan
    kv_transfer_s_p99: float
    first_decode_step_s: float
    prefill_ttft_s: float | None
    problem: str | None
    longest_prompt_tokens: int | None = None


def kv_transfer_s(shape: ModelShape, prompt_tokens: float, link: KvLink) -> float:
    """Seconds to move a prompt's KV (every layer, every KV head) over `link` at line rate."""
    return shape.kv_bytes_per_token * prompt_tokens * 8.0 / (link.gbps * 1e9)


def plan_phases(
    prefill: PlanInputs,
    decode: PlanInputs,
    workload: PhaseWorkload,
    link: KvLink = DEFAULT_KV_LINK,
) -> DisaggregationPlan:
    """Each pool's batching for `workload` (see the module docstring). The two inputs carry the
    same model and SLOs, each on its pool's GPU."""
    seqs, budget, largest_chunk, p_model = _prefill_chunk(prefill, workload)
    mean_prompt = round(workload.mean_prompt_tokens)
    rate = mean_prompt / prefill_s(p_model.pricer, mean_prompt, budget)
    p_plan = PhasePlan(
        "prefill",
        prefill.profile.name,
        budget,
        seqs,
        f"{prefill.profile.name} prefill: chunks of {budget:,} tokens prefill the mean prompt at "
        f"{rate:,.0f} tokens/s, within {PREFILL_CHUNK_TOLERANCE:.0%} of chunks of "
        f"{largest_chunk:,}",
    )

    d_seqs = decode.hints.max_num_seqs or vllm_batch_defaults(decode.profile).max_num_seqs
    d_budget = decode.hints.token_budget or _round_up(d_seqs)
    d_model = replica_model(decode, d_budget, d_seqs)
    context = workload.mean_prompt_tokens + workload.mean_output_tokens / 2
    fits = _decodes_within(d_model, context, decode.slo.itl_p99_s)
    d_plan = PhasePlan(
        "decode",
        decode.profile.name,
        d_budget,
        d_seqs,
        f"{decode.profile.name} decode: decodes alone, the budget vLLM's floor (max_num_seqs "
        f"{d_seqs}); {fits} decodes at a {context:,.0f}-token context fit the "
        + ("KV cache" if decode.slo.itl_p99_s is None else "ITL and the KV cache"),
    )

    transfer_s = kv_transfer_s(prefill.shape, workload.prompt_p99_tokens, link)
    first_s = d_model.pricer.iteration_s(max(1, fits), round(max(1, fits) * context))
    ttft = prefill.slo.ttft_p99_s
    # What the prefill and the hand-off may take: the TTFT less the first decode step.
    within_s = None if ttft is None else ttft - first_s
    left = None if within_s is None else within_s - transfer_s
    reach = None
    if within_s is not None:
        reach = longest_prompt_within(p_model.pricer, budget, within_s, prefill, link)
    tail_s = prefill_s(p_model.pricer, workload.prompt_p99_tokens, budget)
    problem = None
    if within_s is not None and left is not None and tail_s > left:
        problem = (
            f"the P99 prompt ({workload.prompt_p99_tokens:,} tokens) takes {tail_s:.2f} s to "
            f"prefill on {prefill.profile.name} alone, over the {max(0.0, left):.2f} s the TTFT "
            f"leaves after its KV transfer ({transfer_s * 1e3:.0f} ms) and the first decode "
            f"step; {_reach_words(prefill, reach)}"
            + _wider_words(prefill, workload, within_s, link)
        )
    elif fits == 0:
        problem = (
            f"not one decode at a {context:,.0f}-token context fits the ITL on "
            f"{decode.profile.name}"
        )
    return DisaggregationPlan(p_plan, d_plan, transfer_s, first_s, left, problem, reach)


def _prefill_chunk(
    prefill: PlanInputs, workload: PhaseWorkload
) -> tuple[int, int, int, ReplicaModel]:
    """The prefill engines' max_num_seqs, chunk (the smallest within the tolerance of the
    largest considered, unless the spec sets one), that largest chunk, and the replica model
    the chunk is priced with."""
    seqs = prefill.hints.max_num_seqs or vllm_batch_defaults(prefill.profile).max_num_seqs
    p_model = replica_model(prefill, _round_up(seqs), seqs)
    mean_prompt = round(workload.mean_prompt_tokens)
    largest_chunk = max(_round_up(seqs), min(prefill.hints.max_model_len, PREFILL_BUDGET_CAP))
    best = prefill_s(p_model.pricer, mean_prompt, largest_chunk)
    budget = largest_chunk
    candidate = _round_up(seqs)
    while candidate < largest_chunk:
        if prefill_s(p_model.pricer, mean_prompt, candidate) <= best * (
            1 + PREFILL_CHUNK_TOLERANCE
        ):
            budget = candidate
            break
        candidate *= 2
    return seqs, prefill.hints.token_budget or budget, largest_chunk, p_model


def longest_prompt_within(
    pricer: StepPricer, budget: int, within_s: float, prefill: PlanInputs, link: KvLink
) -> int:
    """The longest prompt (up to maxModelLen) whose prefill alone, in chunks of `budget`, and
    KV hand-off over `link` take at most `within_s`: longer prompts miss the TTFT at any load,
    so no number of replicas serves them (0 where not even one token does)."""

    def fits(tokens: int) -> bool:
        spent_s = prefill_s(pricer, tokens, budget) + kv_transfer_s(prefill.shape, tokens, link)
        return spent_s <= within_s

    # Both costs grow with the prompt.
    return largest_where(1, prefill.hints.max_model_len, fits) or 0


def _reach_words(prefill: PlanInputs, reach: int | None) -> str:
    gpus = prefill.hints.tensor_parallel_size
    return (
        f"a prefill replica of {gpus} {prefill.profile.name} GPU{'s' if gpus > 1 else ''} "
        f"meets the TTFT for prompts up to {reach or 0:,} tokens"
    )


def _wider_words(
    prefill: PlanInputs, workload: PhaseWorkload, within_s: float, link: KvLink
) -> str:
    """Where a wider prefill replica (more GPUs, tensor-parallel) would prefill the P99 prompt
    within the TTFT: the narrowest such, with its reach; else nothing."""
    for size in TENSOR_PARALLEL_SIZES:
        if size <= prefill.hints.tensor_parallel_size:
            continue
        try:
            wider = PlanInputs.of(
                prefill.profile,
                prefill.shape,
                prefill.slo,
                replace(prefill.hints, tensor_parallel_size=size),
            )
        except (InvalidSpec, Infeasible):  # the model does not fit that way
            continue
        wider = replace(wider, step_costs=prefill.step_costs)
        _, budget, _, model = _prefill_chunk(wider, workload)
        reach = longest_prompt_within(model.pricer, budget, within_s, wider, link)
        if reach >= workload.prompt_p99_tokens:
            return f"; at tensorParallelSize {size} it would meet it for prompts up to {reach:,}"
    return ""


def phase_models(
    prefill: PlanInputs, decode: PlanInputs, plan: DisaggregationPlan
) -> tuple[ReplicaModel, ReplicaModel]:
    """The replica models the autoscaler sizes each pool with: the prefill pool's with the TTFT
    left after the hand-off and no ITL, the decode pool's with the ITL and computed prompts."""
    ttft = None if plan.prefill_ttft_s is None else max(1e-3, plan.prefill_ttft_s)
    p_model = replace(
        replica_model(prefill, plan.prefill.token_budget, plan.prefill.max_num_seqs),
        itl_slo_s=None,
        ttft_slo_s=ttft,
    )
    d_model = replace(
        replica_model(decode, plan.decode.token_budget, plan.decode.max_num_seqs),
        ttft_slo_s=None,
        prompts_arrive_computed=True,
    )
    return p_model, d_model


def phase_policies(
    spec: LLMServiceSpec,
    models: tuple[ReplicaModel, ReplicaModel],
    bounds: tuple[tuple[int, int], tuple[int, int]],
) -> tuple[AutoscalePolicy, AutoscalePolicy]:
    """The autoscaler's policy of each pool: the spec's (windows, queue target, interval,
    attainment) with the pool's replica bounds and capacity model, the prefill pool answering
    to its share of the TTFT alone and the decode pool to the ITL alone."""
    (p_model, d_model), ((p_min, p_max), (d_min, d_max)) = models, bounds
    prefill = replace(
        policy_from_spec(spec, p_model),
        min_replicas=p_min,
        max_replicas=p_max,
        itl_p99_slo_s=None,
        ttft_p99_slo_s=p_model.ttft_slo_s,
    )
    decode = replace(
        policy_from_spec(spec, d_model),
        min_replicas=d_min,
        max_replicas=d_max,
        ttft_p99_slo_s=None,
    )
    return prefill, decode


def at_batching(inputs: PlanInputs, token_budget: int, max_num_seqs: int) -> PlanInputs:
    """`inputs` with the batching its engines run, which a plan keeps."""
    hints = replace(inputs.hints, token_budget=token_budget, max_num_seqs=max_num_seqs)
    return replace(inputs, hints=hints)


def size_pools(
    spec: LLMServiceSpec,
    inputs: tuple[PlanInputs, PlanInputs],
    workload: PhaseWorkload,
    link: KvLink,
    bounds: tuple[tuple[int, int], tuple[int, int]],
) -> tuple[DisaggregationPlan, tuple[AutoscalePolicy, AutoscalePolicy]]:
    """Both pools' plan for `workload` and the autoscaler's policy of each (`inputs` carry
    the batching the engines run, `at_batching`): what the operator and the simulator's
    contender size the pools with."""
    plan = plan_phases(inputs[0], inputs[1], workload, link)
    return plan, phase_policies(spec, phase_models(inputs[0], inputs[1], plan), bounds)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether splitting the phases pays for a workload, with each way's price of a request
    per second (per GPU-hour price given, or GPU-hours where none is) and the words why."""

    pays: bool
    aggregated_per_rps: float
    disaggregated_per_rps: float
    aggregated_meets_ttft: bool
    words: str


def verdict(
    aggregated: PlanInputs,
    prefill: PlanInputs,
    decode: PlanInputs,
    workload: PhaseWorkload,
    prices: tuple[float, float, float] | None = None,
    link: KvLink = DEFAULT_KV_LINK,
) -> Verdict:
    """Aggregated on `aggregated`'s GPU against disaggregated on the prefill and decode GPUs,
    for `workload`; `prices` per GPU-hour of (aggregated, prefill, decode), or None to count
    GPU-hours."""
    planned = replace(
        aggregated,
        hints=replace(
            aggregated.hints,
            prompt_p99_tokens=workload.prompt_p99_tokens,
            expected_context_tokens=round(
                workload.mean_prompt_tokens + workload.mean_output_tokens / 2
            ),
        ),
    )
    tuned = recommend(planned).decision
    one = replica_model(planned, tuned.token_budget, tuned.max_num_seqs)
    agg_rate = _max_rate(one, workload)
    split = plan_phases(prefill, decode, workload, link)
    p_model, d_model = phase_models(prefill, decode, split)
    p_rate, d_rate = _max_rate(p_model, workload), _max_rate(d_model, workload)
    each = prices or (1.0, 1.0, 1.0)
    # A replica holds its tensor-parallel group's GPUs.
    agg_gpu, p_gpu, d_gpu = (
        price * inputs.hints.tensor_parallel_size
        for price, inputs in zip(each, (aggregated, prefill, decode), strict=True)
    )
    agg = agg_gpu / agg_rate if agg_rate > 0 else math.inf
    dis = p_gpu / p_rate + d_gpu / d_rate if p_rate > 0 and d_rate > 0 else math.inf
    meets = tuned.problem is None
    unit = "GPU-h" if prices is None else "$"
    figures = (
        f"a request/s costs {_money(agg, unit)} aggregated on {aggregated.profile.name} "
        f"({agg_rate:.2f} req/s a replica at {tuned.token_budget:,} tokens) and "
        f"{_money(dis, unit)} split ({p_rate:.2f} req/s a {prefill.profile.name} prefill "
        f"replica, {d_rate:.2f} a {decode.profile.name} decode replica)"
    )
    tail = "" if split.problem is None else f"; split, {split.problem}"
    if not meets and split.problem is None:
        return Verdict(
            True,
            agg,
            dis,
            meets,
            f"split: one pool cannot meet both SLOs for this mix ({tuned.problem}) and two "
            f"can; {figures}",
        )
    if dis * SPLIT_MIN_GAIN <= agg:
        return Verdict(
            True, agg, dis, meets, f"split: {figures}; {agg / dis:.2f}x cheaper split{tail}"
        )
    cost = f"{dis / agg:.2f}x dearer" if dis >= agg else f"only {agg / dis:.2f}x cheaper"
    reason = "" if meets else f"; neither way meets the SLOs for the whole mix ({tuned.problem})"
    return Verdict(False, agg, dis, meets, f"one pool: {figures}; the split {cost}{reason}{tail}")


def _max_rate(model: ReplicaModel, workload: PhaseWorkload) -> float:
    """The most requests/s of `workload` one replica serves within its SLOs (0 if none)."""
    return servable_scale(model, workload.demand(1.0))


def _decodes_within(model: ReplicaModel, context: float, itl_s: float | None) -> int:
    """The most decodes at `context` one replica carries: within its KV cache and, with an ITL,
    a step within the tuner's share of it."""
    kv_fit = int(KV_HEADROOM * model.num_kv_tokens // max(1.0, context))
    high = min(kv_fit, model.max_num_seqs)
    if itl_s is None:
        return high
    limit_s = itl_s * ITL_HEADROOM
    fit = largest_where(
        1, high, lambda n: model.pricer.iteration_s(n, round(n * context)) <= limit_s
    )
    return fit or 0


def prefill_s(pricer: StepPricer, prompt_tokens: int, budget: int) -> float:
    """Seconds to prefill a prompt alone in chunks of `budget` tokens, each attending what the
    chunks before it computed. Its attention is the same however it is chunked; what a larger
    chunk saves is a weight read and a step's overhead per chunk."""
    total_s, done = 0.0, 0
    while done < prompt_tokens:
        chunk = min(budget, prompt_tokens - done)
        total_s += pricer.iteration_s(0, 0, (PrefillChunk(chunk, done),))
        done += chunk
    return total_s


def _round_up(tokens: int) -> int:
    return -(-tokens // BLOCK_SIZE) * BLOCK_SIZE


def _money(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "no finite price"
    return f"${value:.3f} an hour" if unit == "$" else f"{value:.3f} GPUs"
