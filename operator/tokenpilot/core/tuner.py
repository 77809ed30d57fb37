"""The token-budget tuner: `--max-num-batched-tokens` and `--max-num-seqs` for a GPU and SLOs.

Algorithm (every bound is a number and a sentence; the sentences become `binding`):
  1. Plan capacity at the expected context. `max_num_seqs` is the user's cap (vLLM's 256 by
     default): it is not lowered for ITL or to the KV fit, because a request refused a slot waits
     a whole output's worth of steps for one (TTFT breaks), while one more running sequence adds
     only its KV read to a step, and vLLM's block manager admits only what the KV cache holds.
     The decode batch the budget is sized for, `planned`, is the largest that fits the KV cache
     at the expected context and whose step at the smallest budget vLLM allows (max_num_seqs
     tokens, the rest prefill, which costs its arithmetic) stays under the decode share of the
     ITL limit (the P99 ITL target times a headroom factor); load beyond it per replica is the
     autoscaler's.
  2. Upper bound: the largest budget B whose slowest step, `planned` decodes plus the rest prefill
     tokens, stays under the ITL limit; the GPU's threshold caps it: the token budget its
     measurements ran at (estimated where the profile has none), which the tuner never exceeds.
  3. Lower bound: every step stays under the ITL limit, so a prompt of L tokens may take at most
     floor(TTFT / ITL) steps and each must carry ceil(L / steps) prefill tokens.
  4. Pick: interactive takes the largest budget whose slowest step stays within 5 % of the step at
     the smallest budget, raised to the lower bound if TTFT needs more; throughput takes the
     knee, the upper bound, past which ITL breaks or the threshold caps.
     Either way the budget stays within [upper bound, lower bound] when they do not cross.
  5. When the bounds cross, say which SLOs collide and what to change; the budget honours ITL.
     `Infeasible` is raised only for strict SLOs; otherwise `feasible` is False.
Budgets are multiples of the KV block size and lie in [max_num_seqs, max_model_len x max_num_seqs].
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tokenpilot.api.llmservice import BatchingProfile
from tokenpilot.api.model_shape import ModelShape
from tokenpilot.core.capacity import BLOCK_SIZE, CapacityPlan, plan_capacity
from tokenpilot.core.durations import format_duration_s
from tokenpilot.core.errors import Infeasible, InvalidSpec
from tokenpilot.core.profiles import GPUProfile
from tokenpilot.core.roofline import PrefillChunk
from tokenpilot.core.steptime import step_time_model

# The slowest step must leave this fraction of the P99 ITL target for queueing and noise.
ITL_HEADROOM = 0.8
# Pure decode may fill this share of the step limit; the rest is left for the prefill chunk's
# own reads, so a full decode batch does not squeeze the budget down to max_num_seqs.
DECODE_STEP_SHARE = 0.9
# The interactive pick: a step at most this much slower than the one at the smallest budget.
HIDDEN_PREFILL_TOLERANCE = 0.05
# vLLM's own default cap on running sequences outside its largest-GPU setting.
DEFAULT_MAX_NUM_SEQS = 256
# Context assumed per sequence when the user gives none: the prompt plus this many output tokens.
DEFAULT_OUTPUT_TOKENS = 512
DEFAULT_PROMPT_TOKENS = 1536


@dataclass(frozen=True, slots=True)
class ServiceLevel:
    """Latency targets; `strict` turns crossing bounds into `Infeasible`."""

    itl_p99_s: float | None
    ttft_p99_s: float | None
    strict: bool = False


@dataclass(frozen=True, slots=True)
class WorkloadHints:
    """What is known of the workload and the deployment; all optional but the defaults."""

    prompt_p99_tokens: int | None = None
    expected_context_tokens: int | None = None
    max_model_len: int = 8192
    max_num_seqs: int | None = None
    objective: BatchingProfile = BatchingProfile.interactive
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The tuner's answer with its reasons; `binding` names what set each value."""

    gpu: str
    token_budget: int
    max_num_seqs: int
    predicted_itl_p99_s: float
    predicted_ttft_p99_s: float | None
    binding: tuple[str, ...]
    feasible: bool
    message: str
    lower_bound_tokens: int
    upper_bound_tokens: int
    threshold_tokens: int
    measured: bool
    objective: BatchingProfile
    vllm_default_budget: int
    predicted_itl_p99_s_at_default: float
    capacity: CapacityPlan
    step_model: str


def vllm_default_token_budget(profile: GPUProfile) -> int:
    """vLLM's own choice: 8192 on GPUs with at least 70 GiB other than A100, else 2048."""
    names = (profile.name, *profile.aliases, *profile.gpu_product_labels)
    is_a100 = any("a100" in n.lower() for n in names)
    return 8192 if profile.memory_gib >= 70 and not is_a100 else 2048


def recommend(
    profile: GPUProfile, shape: ModelShape, slo: ServiceLevel, hints: WorkloadHints
) -> Recommendation:
    """The budget and max_num_seqs for `shape` on `profile` under `slo`; see the module doc."""
    _check(slo, hints)
    prompt = hints.prompt_p99_tokens
    context = hints.expected_context_tokens or min(
        hints.max_model_len, (prompt or DEFAULT_PROMPT_TOKENS) + DEFAULT_OUTPUT_TOKENS
    )
    capacity = plan_capacity(
        profile,
        shape,
        hints.tensor_parallel_size,
        hints.gpu_memory_utilization,
        hints.max_model_len,
        context,
    )
    model = step_time_model(profile, shape, hints.tensor_parallel_size)
    # Without an ITL target nothing bounds a step but the threshold.
    limit_s = math.inf if slo.itl_p99_s is None else slo.itl_p99_s * ITL_HEADROOM
    itl = "(none)" if slo.itl_p99_s is None else format_duration_s(slo.itl_p99_s)
    ttft = "(none)" if slo.ttft_p99_s is None else format_duration_s(slo.ttft_p99_s)
    binding: list[str] = []
    problems: list[str] = []

    # 1. max_num_seqs
    # The engine's cap weighs queueing against ITL. A request refused a slot waits a whole
    # output's worth of steps for one, which breaks TTFT; one more running sequence adds only its
    # KV read to a step, small next to the weights. vLLM's block manager already admits only
    # what the KV cache holds, so the cap stays at the user's (or vLLM's default): a cap at the
    # KV fit for the mean context would refuse short requests that fit. ITL sizes `planned`, the
    # decode batch the budget is built around; load beyond it per replica raises the P99 ITL or
    # the queue, and the autoscaler adds replicas.
    num_seqs = hints.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    seqs_reason = (
        f"maxNumSeqs cap {num_seqs}"
        if hints.max_num_seqs
        else f"vLLM's default cap of {DEFAULT_MAX_NUM_SEQS} sequences"
    )
    kv_fit = max(1, capacity.max_concurrency)
    kv_reason = (
        f"the KV cache holds {kv_fit} sequences of {context:,} tokens "
        f"({capacity.num_kv_blocks:,} blocks of {BLOCK_SIZE}; vLLM admits by free blocks)"
    )
    # The slowest step's prefill is the tail chunk of a P99 prompt: it attends the whole prompt.
    prompt_tokens = prompt or DEFAULT_PROMPT_TOKENS

    def slowest_for(num_decodes: int, budget: int) -> float:
        decodes = min(num_decodes, budget)
        prefill = budget - decodes
        chunk = PrefillChunk(prefill, max(0, prompt_tokens - prefill))
        return model.iteration_s(decodes, decodes * context, (chunk,) if prefill else ())

    floor_budget = _round_up(num_seqs)
    max_budget = max(floor_budget, hints.max_model_len * num_seqs // BLOCK_SIZE * BLOCK_SIZE)

    def smallest_step_s(num_decodes: int) -> float:
        # Every prefill token costs its arithmetic, so a step at the smallest budget vLLM
        # allows (max_num_seqs) is the cheapest full step these decodes can share.
        return slowest_for(num_decodes, max(floor_budget, _round_up(num_decodes)))

    decode_limit_s = limit_s * DECODE_STEP_SHARE
    fit = min(kv_fit, num_seqs)
    planned = _largest(1, fit, lambda s: smallest_step_s(s) <= decode_limit_s)
    if planned is None:
        planned = 1
        problems.append(
            f"even one sequence at {context:,} tokens, beside the prefill of the smallest budget "
            f"vLLM allows ({floor_budget:,} tokens), takes "
            f"{format_duration_s(smallest_step_s(1))} per step on {profile.name}, over the "
            f"{format_duration_s(decode_limit_s)} decode share of the step limit for ITL {itl}"
        )
        binding.append(
            f"max_num_seqs {num_seqs}: {seqs_reason}; ITL {itl} cannot be met even by one "
            "sequence, and a lower cap would only queue requests"
        )
    elif planned < fit:
        binding.append(
            f"max_num_seqs {num_seqs}: {seqs_reason}; {kv_reason}. ITL {itl} leaves "
            f"{format_duration_s(decode_limit_s)} per step for decode beside the smallest "
            f"budget's prefill, enough for {planned} of them: the budget is sized for {planned} "
            "decodes, and load beyond that per replica is the autoscaler's to spread"
        )
    else:
        binding.append(f"max_num_seqs {num_seqs}: {seqs_reason}; {kv_reason}")

    def slowest_s(budget: int) -> float:
        return slowest_for(planned, budget)

    def largest_budget(num_decodes: int, step_limit_s: float, high: int) -> int | None:
        blocks = _largest(
            floor_budget // BLOCK_SIZE,
            high // BLOCK_SIZE,
            lambda k: slowest_for(num_decodes, k * BLOCK_SIZE) <= step_limit_s,
        )
        return None if blocks is None else blocks * BLOCK_SIZE

    # A looser ITL plans more decodes, and each takes a share of the step from prefill: just
    # past the ITL at which one more decode fits, the ITL bound dips below the one here. A
    # tighter ITL must never get a larger budget, so each bound below is also the lowest that
    # any looser ITL (planning up to `fit` decodes) would give.
    looser = [
        (more, smallest_step_s(more) / DECODE_STEP_SHARE) for more in range(planned + 1, fit + 1)
    ]

    # 2. upper bound
    itl_bound = largest_budget(planned, limit_s, max_budget)
    itl_blocks = None if itl_bound is None else itl_bound // BLOCK_SIZE
    itl_bound = floor_budget if itl_bound is None else itl_bound
    envelope_reason = ""
    if itl_blocks is not None:
        for more, looser_limit_s in looser:
            bound = largest_budget(more, looser_limit_s, itl_bound)
            if bound is not None and bound < itl_bound:
                itl_bound = bound
                looser_itl = format_duration_s(looser_limit_s / ITL_HEADROOM)
                envelope_reason = (
                    f" (no more than a looser ITL of {looser_itl} allows with {more} decodes: "
                    "a tighter ITL never gets a larger budget)"
                )
    threshold = max(floor_budget, model.threshold_tokens // BLOCK_SIZE * BLOCK_SIZE)
    basis = "measured" if model.measured else "estimated from the datasheet"
    if threshold <= itl_bound:
        upper = threshold
        upper_source = f"the {basis} threshold caps B at {upper:,}"
        upper_reason = (
            f"at most {upper:,}: the {basis} threshold of {model.threshold_tokens:,} tokens on "
            f"{profile.name}, the largest budget its measurements support"
        )
        if itl_bound > threshold and slo.itl_p99_s is not None:
            upper_reason += f" (ITL {itl} alone would allow {itl_bound:,})"
    else:
        upper = itl_bound
        upper_source = f"ITL {itl} needs B <= {upper:,}"
        upper_reason = (
            f"at most {upper:,}: ITL {itl} keeps the slowest step (all {planned} decodes plus "
            f"prefill) under {format_duration_s(limit_s)}{envelope_reason}"
        )
        if itl_blocks is None and not problems:
            problems.append(
                f"ITL {itl} needs steps under {format_duration_s(limit_s)}, but "
                f"{planned} decodes alone take {format_duration_s(slowest_s(floor_budget))}"
            )

    # 3. lower bound
    lower = floor_budget
    lower_reason = f"at least {lower:,}: vLLM needs a budget of at least max_num_seqs"
    if prompt is not None and slo.ttft_p99_s is not None:
        step_bound_s = limit_s if slo.itl_p99_s is not None else slowest_s(upper)
        num_steps = math.floor(slo.ttft_p99_s * ITL_HEADROOM / step_bound_s + 1e-9)
        if num_steps < 1:
            lower = max_budget + BLOCK_SIZE
            lower_reason = f"TTFT {ttft} is shorter than one step at ITL {itl}"
            problems.append(lower_reason)
        else:
            lower = max(floor_budget, _round_up(planned + math.ceil(prompt / num_steps)))
            lower_reason = (
                f"at least {lower:,}: TTFT {ttft} at {prompt:,}-token prompts allows "
                f"{num_steps} steps of under {format_duration_s(step_bound_s)}, so each must carry "
                f"{math.ceil(prompt / num_steps):,} prompt tokens beside {planned} decodes"
            )

    # 4. pick
    def hidden_for(num_decodes: int, high: int) -> int:
        hidden_limit_s = slowest_for(num_decodes, floor_budget) * (1 + HIDDEN_PREFILL_TOLERANCE)
        return largest_budget(num_decodes, hidden_limit_s, high) or floor_budget

    hidden_top = hidden_for(planned, upper)
    for more, _ in looser:  # the same envelope as the upper bound's
        hidden_top = min(hidden_top, hidden_for(more, hidden_top))
    if hints.objective is BatchingProfile.throughput:
        budget = upper
        binding.append(f"token_budget {budget:,} (throughput: the knee) {upper_reason}")
    elif hints.objective is BatchingProfile.balanced:
        interactive = min(upper, max(lower, hidden_top))
        budget = _round_up((interactive + upper) // 2)
        binding.append(
            f"token_budget {budget:,} (balanced): halfway between the interactive pick "
            f"{interactive:,} and the knee {upper:,}"
        )
    else:
        budget = min(upper, max(lower, hidden_top))
        if budget == upper and upper <= hidden_top:
            binding.append(f"token_budget {budget:,} {upper_reason}")
        elif budget == lower and lower > hidden_top:
            binding.append(f"token_budget {budget:,} {lower_reason}")
        else:
            binding.append(
                f"token_budget {budget:,} (interactive): the largest budget whose slowest step "
                f"stays within {HIDDEN_PREFILL_TOLERANCE:.0%} of the smallest budget's (slowest "
                f"step {format_duration_s(slowest_s(budget))}, at the smallest budget "
                f"{format_duration_s(slowest_s(floor_budget))})"
            )

    crossed = lower > upper
    if crossed and not problems and prompt is not None:
        problems.append(
            f"{upper_source} on {profile.name}; TTFT {ttft} at "
            f"{_tokens_k(prompt)}-token prompts needs B >= {lower:,}"
        )
    feasible = not problems
    if feasible:
        message = (
            f"{profile.name}: --max-num-batched-tokens {budget} --max-num-seqs {num_seqs} "
            f"({hints.objective.value}; bounds {lower:,}..{upper:,})"
        )
    else:
        message = (
            "; ".join(problems) + ": choose a faster SKU, relax an SLO, or split prefill and decode"
        )
        if slo.strict:
            raise Infeasible(message)

    predicted_ttft = (
        None if prompt is None else math.ceil(prompt / max(1, budget - planned)) * slowest_s(budget)
    )
    default_budget = vllm_default_token_budget(profile)
    return Recommendation(
        gpu=profile.name,
        token_budget=budget,
        max_num_seqs=num_seqs,
        predicted_itl_p99_s=slowest_s(budget),
        predicted_ttft_p99_s=predicted_ttft,
        binding=tuple(binding),
        feasible=feasible,
        message=message,
        lower_bound_tokens=lower,
        upper_bound_tokens=upper,
        threshold_tokens=model.threshold_tokens,
        measured=model.measured,
        objective=hints.objective,
        vllm_default_budget=default_budget,
        predicted_itl_p99_s_at_default=slowest_s(default_budget),
        capacity=capacity,
        step_model=model.describe(),
    )


def _check(slo: ServiceLevel, hints: WorkloadHints) -> None:
    if slo.itl_p99_s is not None and not slo.itl_p99_s > 0:
        raise InvalidSpec(f"itlP99 must be positive, got {slo.itl_p99_s} s")
    if slo.ttft_p99_s is not None and not slo.ttft_p99_s > 0:
        raise InvalidSpec(f"ttftP99 must be positive, got {slo.ttft_p99_s} s")
    if hints.max_model_len < BLOCK_SIZE:
        raise InvalidSpec(f"maxModelLen must be at least {BLOCK_SIZE}, got {hints.max_model_len}")
    prompt = hints.prompt_p99_tokens
    if prompt is not None and not 1 <= prompt <= hints.max_model_len:
        raise InvalidSpec(
            f"promptP99 {prompt} tokens must be between 1 and maxModelLen "
            f"({hints.max_model_len}); raise maxModelLen or lower the prompt length"
        )
    if hints.max_num_seqs is not None and hints.max_num_seqs < 1:
        raise InvalidSpec(f"maxNumSeqs must be at least 1, got {hints.max_num_seqs}")


def _largest(low: int, high: int, ok: Callable[[int], bool]) -> int | None:
    """The largest n in [low, high] with ok(n), for ok true up to a point then false."""
    if high < low or not ok(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if ok(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _round_up(tokens: int) -> int:
    return -(-tokens // BLOCK_SIZE) * BLOCK_SIZE


def _tokens_k(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else f"{tokens:,}"


__all__ = [
    "Recommendation",
    "ServiceLevel",
    "WorkloadHints",
    "recommend",
    "vllm_default_token_budget",
]
