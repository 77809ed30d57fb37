"""The token-budget tuner: `--max-num-batched-tokens` and `--max-num-seqs` for a GPU and SLOs.

Algorithm; each numbered step is one function below, and every bound is a `Bound` (a kind,
tokens and words):
  1. `choose_max_num_seqs`: the user's cap, else vLLM's own default for the GPU
     (`api.vllm_defaults`; or a smaller budget the spec sets, as vLLM itself caps it).
     It is not lowered to the KV fit, because a request refused a slot waits a whole output's
     worth of steps for one (TTFT breaks), while one more running sequence adds only its KV
     read to a step, and vLLM's block manager admits only what the KV cache holds. It is lowered
     for ITL only where that plans materially more decodes: vLLM needs a budget of at least
     max_num_seqs, so when a step of that many tokens leaves room in the decode share of the ITL
     limit for far fewer of the decodes the KV cache holds than a smaller cap would (or for none
     at all), the cap comes down to the smallest that still carries the prompt tokens TTFT needs
     per step.
     The decode batch the budget is sized for, `planned`, is the largest that fits the KV cache
     at the expected context and whose step at the smallest budget vLLM allows (max_num_seqs
     tokens, the rest prefill, which costs its arithmetic) stays under the decode share of the
     ITL limit (the P99 ITL target times a headroom factor); load beyond it is the autoscaler's.
  2. `upper_bound`: the largest budget B whose slowest step, `planned` decodes plus the rest
     prefill tokens, stays under the ITL limit; the GPU's threshold caps it: the token budget
     its measurements ran at (estimated where the profile has none), which the tuner never
     exceeds.
  3. `lower_bound`: every step stays under the ITL limit, so a prompt of L tokens may take at most
     floor(TTFT / ITL) steps and each must carry ceil(L / steps) prefill tokens.
  4. `pick_budget`: interactive takes the largest budget whose slowest step stays within 5 % of
     the step at the smallest budget, raised to the lower bound if TTFT needs more; throughput
     takes the knee, the upper bound, past which ITL breaks or the threshold caps; balanced the
     midpoint of the two. A budget the spec sets is kept as it is.
  5. `judge`: when the bounds cross, say which SLOs collide and what to change; the budget
     honours ITL. `Infeasible` is raised only for strict SLOs; otherwise the decision carries
     the problem.
A step is priced as `StepPrices` says: the decodes at the expected context beside the tail chunk
of a P99 prompt, which attends the whole prompt. Budgets are multiples of the KV block size and
lie in [max_num_seqs, max_model_len x max_num_seqs]. The step model is used only through
`StepModel`'s four members.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import (
    BatchingProfile,
    BatchingSource,
    BoundKind,
    SeqsSource,
)
from tokenpilot.api.vllm_defaults import BatchDefaults, vllm_batch_defaults
from tokenpilot.core.batching import BatchingDecision, Bound
from tokenpilot.core.capacity import BLOCK_SIZE, CapacityPlan
from tokenpilot.core.durations import format_duration_s
from tokenpilot.core.errors import Infeasible, InvalidSpec
from tokenpilot.core.plan_inputs import PlanInputs, ServiceLevel, WorkloadHints
from tokenpilot.core.roofline import PrefillChunk, StepPricer, priced_at
from tokenpilot.core.steptime import step_time_model

# The slowest step must leave this fraction of the P99 ITL target for queueing and noise.
ITL_HEADROOM = 0.8
# Pure decode may fill this share of the step limit; the rest is left for the prefill chunk's
# own reads, so a full decode batch does not squeeze the budget down to max_num_seqs.
DECODE_STEP_SHARE = 0.9
# The interactive pick: a step at most this much slower than the one at the smallest budget.
HIDDEN_PREFILL_TOLERANCE = 0.05
# vLLM's cap is also its admission limit: it comes down (where one decode still fits beside its
# smallest budget) only for a smaller cap that plans at least this many times the decodes.
CAP_LOWERING_MIN_GAIN = 1.25
# Context assumed per sequence when the user gives none: the prompt plus this many output tokens.
DEFAULT_OUTPUT_TOKENS = 512
DEFAULT_PROMPT_TOKENS = 1536
FIX = "choose a faster SKU, relax an SLO, or split prefill and decode"
# The largest engine slowdown a plan or a simulation accepts: past it the profile describes
# some other GPU, and a calibration, not a factor, is the answer.
MAX_ENGINE_SLOWDOWN = 4.0


class StepModel(StepPricer, Protocol):
    """What the tuner asks of a step-time model (`core.steptime`)."""

    @property
    def threshold_tokens(self) -> int: ...

    @property
    def measured(self) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True, slots=True)
class AtMeasuredPace:
    """A step model on engines measured slower than it prices them, per term (the autoscaler's
    status.engineCosts, or `tokenpilot plan --engine-slowdown`): decode-only steps `decode`
    times its price, the prefill beside them `prefill` times, never shorter
    (core.roofline.priced_at), with the model's own threshold and basis."""

    model: StepModel
    decode: float
    prefill: float

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float:
        pricer = priced_at(self.model, self.decode, self.prefill)
        return pricer.iteration_s(num_decodes, decode_context_tokens, prefill_chunks)

    @property
    def threshold_tokens(self) -> int:
        return self.model.threshold_tokens

    @property
    def measured(self) -> bool:
        return self.model.measured

    def describe(self) -> str:
        pace = (
            f"{self.decode:g}x that"
            if self.decode == self.prefill
            else f"{self.decode:g}x that for the decodes and {self.prefill:g}x for the prefill"
        )
        measured = "the pace the engines were measured at"
        return f"{self.model.describe()}; every step priced {pace}, {measured}"


@dataclass(frozen=True, slots=True)
class StepPrices:
    """What a step costs on this GPU for this workload: decodes at the expected context beside
    the tail chunk of a P99 prompt, which attends the whole prompt."""

    model: StepModel
    context_tokens: int
    prompt_tokens: int

    def step_s(self, num_decodes: int, budget: int) -> float:
        """A step of `budget` tokens: `num_decodes` decodes (at most the budget), the rest
        prefill."""
        decodes = min(num_decodes, budget)
        prefill = budget - decodes
        chunk = PrefillChunk(prefill, max(0, self.prompt_tokens - prefill))
        return self.model.iteration_s(
            decodes, decodes * self.context_tokens, (chunk,) if prefill else ()
        )

    def smallest_step_s(self, num_decodes: int, max_num_seqs: int) -> float:
        """Every prefill token costs its arithmetic, so a step at the smallest budget vLLM
        allows (max_num_seqs) is the cheapest full step these decodes can share."""
        return self.step_s(num_decodes, max(_round_up(max_num_seqs), _round_up(num_decodes)))


@dataclass(frozen=True, slots=True)
class SeqsChoice:
    """Step 1's answer: the engine's cap, and the decode batch the budget is sized for."""

    max_num_seqs: int
    source: SeqsSource
    planned_decodes: int
    # The most decodes any looser ITL could plan: min(KV fit, max_num_seqs).
    max_decodes: int
    words: str
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class StepFrame:
    """What steps 2 to 4 share: the step model at the expected context, the step limit and the
    range a budget may take."""

    gpu: str
    prices: StepPrices
    step_limit_s: float
    planned_decodes: int
    # (decodes, step limit) for each ITL looser than the target that plans more decodes.
    looser: tuple[tuple[int, float], ...]
    floor_budget: int
    max_budget: int

    @property
    def model(self) -> StepModel:
        return self.prices.model

    def slowest_step_s(self, budget: int, num_decodes: int | None = None) -> float:
        """A step of `budget` tokens: the decodes (all planned by default), the rest prefill."""
        decodes = self.planned_decodes if num_decodes is None else num_decodes
        return self.prices.step_s(decodes, budget)

    def largest_budget(self, num_decodes: int, step_limit_s: float, high: int) -> int | None:
        """The largest block multiple in [floor, high] whose slowest step fits the limit."""
        blocks = largest_where(
            self.floor_budget // BLOCK_SIZE,
            high // BLOCK_SIZE,
            lambda k: self.slowest_step_s(k * BLOCK_SIZE, num_decodes) <= step_limit_s,
        )
        return None if blocks is None else blocks * BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The tuner's answer: the decision, and the predictions and plans behind it."""

    gpu: str
    decision: BatchingDecision
    objective: BatchingProfile
    planned_decodes: int
    predicted_itl_p99_s: float
    predicted_ttft_p99_s: float | None
    vllm_default_budget: int
    vllm_default_max_num_seqs: int
    predicted_itl_p99_s_at_default: float
    threshold_tokens: int
    measured: bool
    capacity: CapacityPlan
    step_model: str
    # The vLLM flags when the SLOs can be met, else which collide and what to change.
    message: str


def recommend(inputs: PlanInputs, *, engine_slowdown: float = 1.0) -> Recommendation:
    """The budget and max_num_seqs for the inputs' model on their GPU under their SLOs; see
    the module doc. `engine_slowdown`: plan for engines measured that many times slower than
    the profile prices them (at least 1)."""
    profile, slo, hints = inputs.profile, inputs.slo, inputs.hints
    check_inputs(slo, hints)
    prompt = hints.prompt_p99_tokens
    context = hints.expected_context_tokens or min(
        hints.max_model_len, (prompt or DEFAULT_PROMPT_TOKENS) + DEFAULT_OUTPUT_TOKENS
    )
    capacity = inputs.capacity.at_context(context)
    model: StepModel = step_time_model(profile, inputs.shape, hints.tensor_parallel_size)
    decode, prefill = inputs.step_costs
    if engine_slowdown != 1.0:
        decode, prefill = decode * engine_slowdown, prefill * engine_slowdown
    if (decode, prefill) != (1.0, 1.0):
        model = AtMeasuredPace(model, decode, prefill)
    prices = StepPrices(model, context, prompt or DEFAULT_PROMPT_TOKENS)
    # Without an ITL target nothing bounds a step but the threshold.
    step_limit_s = math.inf if slo.itl_p99_s is None else slo.itl_p99_s * ITL_HEADROOM

    defaults = vllm_batch_defaults(profile)
    seqs = choose_max_num_seqs(
        profile.name, prices, capacity, step_limit_s, slo, hints, defaults=defaults
    )
    frame = step_frame(profile.name, prices, step_limit_s, hints, seqs)
    upper, upper_problem = upper_bound(frame, slo)
    lower, lower_problem = lower_bound(frame, slo, prompt, upper)
    set_by = pick_budget(frame, hints, lower, upper)
    problem = judge(frame, slo, prompt, lower, upper, (seqs.problem, upper_problem, lower_problem))

    budget = set_by.tokens
    predicted_ttft = (
        None
        if prompt is None
        else math.ceil(prompt / max(1, budget - frame.planned_decodes))
        * frame.slowest_step_s(budget)
    )
    default_budget = defaults.max_num_batched_tokens
    decision = BatchingDecision(
        token_budget=budget,
        max_num_seqs=seqs.max_num_seqs,
        source=(
            BatchingSource.measured_profile if model.measured else BatchingSource.datasheet_profile
        ),
        set_by=set_by,
        max_num_seqs_source=seqs.source,
        max_num_seqs_words=seqs.words,
        lower=lower,
        upper=upper,
        problem=problem,
        calibrated_profile=_calibrated(profile),
    )
    return Recommendation(
        gpu=profile.name,
        decision=decision,
        objective=hints.objective,
        planned_decodes=frame.planned_decodes,
        predicted_itl_p99_s=frame.slowest_step_s(budget),
        predicted_ttft_p99_s=predicted_ttft,
        vllm_default_budget=default_budget,
        vllm_default_max_num_seqs=defaults.max_num_seqs,
        predicted_itl_p99_s_at_default=frame.slowest_step_s(default_budget),
        threshold_tokens=model.threshold_tokens,
        measured=model.measured,
        capacity=capacity,
        step_model=model.describe(),
        message=problem
        or (
            f"{profile.name}: --max-num-batched-tokens {budget} --max-num-seqs "
            f"{seqs.max_num_seqs} ({hints.objective.value}; bounds {lower.tokens:,}.."
            f"{upper.tokens:,})"
        ),
    )


def choose_max_num_seqs(
    gpu: str,
    prices: StepPrices,
    capacity: CapacityPlan,
    step_limit_s: float,
    slo: ServiceLevel,
    hints: WorkloadHints,
    *,
    defaults: BatchDefaults,
) -> SeqsChoice:
    """Step 1: the engine's cap on running sequences, and `planned`, the decodes per step the
    budget is sized for. `defaults` are vLLM's own for the GPU."""
    if hints.max_num_seqs is not None:
        num_seqs, source = hints.max_num_seqs, SeqsSource.spec
        seqs_reason = f"maxNumSeqs cap {num_seqs}"
    elif hints.token_budget is not None and hints.token_budget < defaults.max_num_seqs:
        # Every running sequence needs a token of the budget per step.
        num_seqs, source = hints.token_budget, SeqsSource.token_budget
        seqs_reason = f"the spec's token budget of {num_seqs} fits no more sequences"
    else:
        num_seqs, source = defaults.max_num_seqs, SeqsSource.vllm_default
        seqs_reason = f"vLLM's default cap of {num_seqs} sequences on {gpu}"
    decode_limit_s = step_limit_s * DECODE_STEP_SHARE
    context = prices.context_tokens
    kv_fit = max(1, capacity.max_concurrency)
    if source is SeqsSource.vllm_default:
        prefill_per_step = _prefill_per_step(prices, step_limit_s, slo, num_seqs)
        lowered = _lowered_for_itl(prices, decode_limit_s, num_seqs, prefill_per_step, kv_fit)
        if lowered is not None:
            seqs_reason = _lowered_words(
                gpu, prices, slo, decode_limit_s, (num_seqs, lowered), kv_fit
            )
            num_seqs, source = lowered, SeqsSource.itl
    kv_reason = (
        f"the KV cache holds {kv_fit} sequences of {context:,} tokens "
        f"({capacity.num_kv_blocks:,} blocks of {BLOCK_SIZE}; vLLM admits by free blocks)"
    )
    itl = _target(slo.itl_p99_s)
    max_decodes = min(kv_fit, num_seqs)
    planned = largest_where(
        1, max_decodes, lambda s: prices.smallest_step_s(s, num_seqs) <= decode_limit_s
    )
    if planned is None:
        return SeqsChoice(
            num_seqs,
            source,
            planned_decodes=1,
            max_decodes=max_decodes,
            words=(
                f"max_num_seqs {num_seqs}: {seqs_reason}; ITL {itl} cannot be met even by one "
                "sequence"
            ),
            problem=(
                f"even one sequence at {context:,} tokens, beside the prefill of the smallest "
                f"budget vLLM allows ({_round_up(num_seqs):,} tokens), takes "
                f"{format_duration_s(prices.smallest_step_s(1, num_seqs))} per step on {gpu}, "
                f"over the {format_duration_s(decode_limit_s)} decode share of the step limit "
                f"for ITL {itl}"
            ),
        )
    if planned < max_decodes:
        words = (
            f"max_num_seqs {num_seqs}: {seqs_reason}; {kv_reason}. ITL {itl} leaves "
            f"{format_duration_s(decode_limit_s)} per step for decode beside the smallest "
            f"budget's prefill, enough for {planned} of them: the budget is sized for {planned} "
            "decodes, and load beyond that per replica is the autoscaler's to spread"
        )
    else:
        words = f"max_num_seqs {num_seqs}: {seqs_reason}; {kv_reason}"
    return SeqsChoice(num_seqs, source, planned, max_decodes, words)


def _lowered_for_itl(
    prices: StepPrices, decode_limit_s: float, num_seqs: int, prefill_per_step: int, kv_fit: int
) -> int | None:
    """A cap on running sequences below `num_seqs` when vLLM's smallest budget (max_num_seqs
    tokens) costs the step its decodes: when that step is over the decode share of the step
    limit beside even one decode, or when a smaller cap leaves room beside it for materially
    more (`CAP_LOWERING_MIN_GAIN`) of the `kv_fit` decodes the KV cache holds. None when no
    smaller cap plans that many more.

    The cap is the smallest that still carries `prefill_per_step` prompt tokens beside the
    decodes that fit: every token of the smallest budget spent on prefill beyond that is a
    decode the step could have carried instead."""
    highest = largest_where(
        1,
        num_seqs // BLOCK_SIZE,
        lambda k: prices.smallest_step_s(1, k * BLOCK_SIZE) <= decode_limit_s,
    )
    if highest is None:
        # Not even one decode fits beside a block of prefill: the smallest cap honours ITL
        # as far as any can.
        return BLOCK_SIZE

    def beside(cap: int) -> int:
        fit = largest_where(1, cap, lambda n: prices.smallest_step_s(n, cap) <= decode_limit_s)
        return fit or 0

    cap = next(
        (
            k * BLOCK_SIZE
            for k in range(1, highest + 1)
            if k * BLOCK_SIZE - beside(k * BLOCK_SIZE) >= prefill_per_step
        ),
        highest * BLOCK_SIZE,
    )
    if cap >= num_seqs:
        return None
    planned = _decodes_beside(prices, decode_limit_s, num_seqs, kv_fit)
    gained = _decodes_beside(prices, decode_limit_s, cap, kv_fit)
    return cap if gained > planned and gained >= CAP_LOWERING_MIN_GAIN * planned else None


def _lowered_words(
    gpu: str,
    prices: StepPrices,
    slo: ServiceLevel,
    decode_limit_s: float,
    caps: tuple[int, int],
    kv_fit: int,
) -> str:
    """Why vLLM's cap `caps[0]` came down to `caps[1]`, in words."""
    default, lowered = caps
    share = f"the {format_duration_s(decode_limit_s)} decode share of ITL {_target(slo.itl_p99_s)}"
    step = f"a step of {_round_up(default)} tokens"
    if prices.smallest_step_s(1, default) > decode_limit_s:
        cost = (
            f"{step} takes {format_duration_s(prices.smallest_step_s(1, default))} on {gpu}, "
            f"over {share}"
        )
    else:
        fit_default = _decodes_beside(prices, decode_limit_s, default, kv_fit)
        fit_lowered = _decodes_beside(prices, decode_limit_s, lowered, kv_fit)
        cost = (
            f"beside {step} on {gpu} only {fit_default} of the {kv_fit} decodes the KV cache "
            f"holds fit {share}, beside {lowered} tokens {fit_lowered}"
        )
    return (
        f"vLLM's default cap of {default} sequences lowered to {lowered}: vLLM needs a budget of "
        f"at least max_num_seqs, and {cost}; {lowered} leaves room for the prompt tokens TTFT "
        "needs per step and as many decodes as fit beside them"
    )


def _decodes_beside(prices: StepPrices, decode_limit_s: float, cap: int, kv_fit: int) -> int:
    """The decodes, at most the KV fit and the cap, that fit the decode share beside the
    smallest budget vLLM allows under cap `cap` (0 when not even one does)."""
    fit = largest_where(
        1, min(cap, kv_fit), lambda n: prices.smallest_step_s(n, cap) <= decode_limit_s
    )
    return fit or 0


def _prefill_per_step(
    prices: StepPrices, step_limit_s: float, slo: ServiceLevel, num_seqs: int
) -> int:
    """Prompt tokens a step must carry for a P99 prompt to prefill within TTFT in steps of the
    limit (as step 3 reckons); without a TTFT target or a step limit, half of the cap being
    lowered, so prefill and decode share the smallest budget."""
    if slo.ttft_p99_s is None or math.isinf(step_limit_s):
        return num_seqs // 2
    num_steps = max(1, math.floor(slo.ttft_p99_s * ITL_HEADROOM / step_limit_s + 1e-9))
    return math.ceil(prices.prompt_tokens / num_steps)


def step_frame(
    gpu: str, prices: StepPrices, step_limit_s: float, hints: WorkloadHints, seqs: SeqsChoice
) -> StepFrame:
    """What steps 2 to 4 share, once step 1 has set max_num_seqs and `planned`.

    A looser ITL plans more decodes, and each takes a share of the step from prefill: just
    past the ITL at which one more decode fits, the ITL bound dips below the one here. A
    tighter ITL must never get a larger budget, so each bound is also the lowest that any
    looser ITL (planning up to `max_decodes`) would give; `looser` lists those plans."""
    floor_budget = _round_up(seqs.max_num_seqs)
    return StepFrame(
        gpu=gpu,
        prices=prices,
        step_limit_s=step_limit_s,
        planned_decodes=seqs.planned_decodes,
        looser=tuple(
            (more, prices.smallest_step_s(more, seqs.max_num_seqs) / DECODE_STEP_SHARE)
            for more in range(seqs.planned_decodes + 1, seqs.max_decodes + 1)
        ),
        floor_budget=floor_budget,
        max_budget=max(
            floor_budget, hints.max_model_len * seqs.max_num_seqs // BLOCK_SIZE * BLOCK_SIZE
        ),
    )


def upper_bound(frame: StepFrame, slo: ServiceLevel) -> tuple[Bound, str | None]:
    """Step 2: the largest budget whose slowest step keeps ITL, capped by the GPU's threshold;
    and the problem when even the smallest budget does not keep it."""
    f, itl = frame, _target(slo.itl_p99_s)
    itl_bound = f.largest_budget(f.planned_decodes, f.step_limit_s, f.max_budget)
    itl_met = itl_bound is not None
    itl_bound = f.floor_budget if itl_bound is None else itl_bound
    envelope = ""
    if itl_met:
        for more, looser_limit_s in f.looser:
            bound = f.largest_budget(more, looser_limit_s, itl_bound)
            if bound is not None and bound < itl_bound:
                itl_bound = bound
                looser_itl = format_duration_s(looser_limit_s / ITL_HEADROOM)
                envelope = (
                    f" (no more than a looser ITL of {looser_itl} allows with {more} decodes: "
                    "a tighter ITL never gets a larger budget)"
                )
    threshold = max(f.floor_budget, f.model.threshold_tokens // BLOCK_SIZE * BLOCK_SIZE)
    if threshold <= itl_bound:
        words = (
            f"at most {threshold:,}: the {_basis(f.model)} threshold of "
            f"{f.model.threshold_tokens:,} tokens on {f.gpu}, the largest budget its measurements "
            "support"
        )
        if itl_bound > threshold and slo.itl_p99_s is not None:
            words += f" (ITL {itl} alone would allow {itl_bound:,})"
        return Bound(BoundKind.step_threshold, threshold, words), None
    words = (
        f"at most {itl_bound:,}: ITL {itl} keeps the slowest step (all {f.planned_decodes} "
        f"decodes plus prefill) under {format_duration_s(f.step_limit_s)}{envelope}"
    )
    problem = (
        None
        if itl_met
        else (
            f"ITL {itl} needs steps under {format_duration_s(f.step_limit_s)}, but "
            f"{f.planned_decodes} decodes alone take "
            f"{format_duration_s(f.slowest_step_s(f.floor_budget))}"
        )
    )
    return Bound(BoundKind.itl_step, itl_bound, words), problem


def lower_bound(
    frame: StepFrame, slo: ServiceLevel, prompt: int | None, upper: Bound
) -> tuple[Bound, str | None]:
    """Step 3: the smallest budget that prefills a P99 prompt within TTFT (at least
    max_num_seqs); and the problem when TTFT is shorter than one step."""
    f, itl, ttft = frame, _target(slo.itl_p99_s), _target(slo.ttft_p99_s)
    floor = Bound(
        BoundKind.max_num_seqs,
        f.floor_budget,
        f"at least {f.floor_budget:,}: vLLM needs a budget of at least max_num_seqs",
    )
    if prompt is None or slo.ttft_p99_s is None:
        return floor, None
    step_bound_s = f.step_limit_s if slo.itl_p99_s is not None else f.slowest_step_s(upper.tokens)
    num_steps = math.floor(slo.ttft_p99_s * ITL_HEADROOM / step_bound_s + 1e-9)
    if num_steps < 1:
        words = f"TTFT {ttft} is shorter than one step at ITL {itl}"
        return Bound(BoundKind.ttft_prefill, f.max_budget + BLOCK_SIZE, words), words
    per_step = math.ceil(prompt / num_steps)
    tokens = max(f.floor_budget, _round_up(f.planned_decodes + per_step))
    words = (
        f"at least {tokens:,}: TTFT {ttft} at {prompt:,}-token prompts allows "
        f"{num_steps} steps of under {format_duration_s(step_bound_s)}, so each must carry "
        f"{per_step:,} prompt tokens beside {f.planned_decodes} decodes"
    )
    return Bound(BoundKind.ttft_prefill, tokens, words), None


def pick_budget(frame: StepFrame, hints: WorkloadHints, lower: Bound, upper: Bound) -> Bound:
    """Step 4: where the objective puts the budget between the bounds (or the spec's budget)."""
    f = frame
    if hints.token_budget is not None:
        return Bound(
            BoundKind.spec,
            hints.token_budget,
            f"maxNumBatchedTokens {hints.token_budget:,} is set in the spec (the tuner's bounds: "
            f"{lower.tokens:,} to {upper.tokens:,})",
        )

    def hidden_for(num_decodes: int, high: int) -> int:
        pure_decode_s = f.slowest_step_s(f.floor_budget, num_decodes)
        limit_s = pure_decode_s * (1 + HIDDEN_PREFILL_TOLERANCE)
        return f.largest_budget(num_decodes, limit_s, high) or f.floor_budget

    hidden_top = hidden_for(f.planned_decodes, upper.tokens)
    for more, _ in f.looser:  # the same envelope as the upper bound's
        hidden_top = min(hidden_top, hidden_for(more, hidden_top))
    interactive = min(upper.tokens, max(lower.tokens, hidden_top))
    if hints.objective is BatchingProfile.throughput:
        words = f"token_budget {upper.tokens:,} (throughput: the knee) {upper.words}"
        return Bound(upper.kind, upper.tokens, words)
    if hints.objective is BatchingProfile.balanced:
        budget = _round_up((interactive + upper.tokens) // 2)
        words = (
            f"token_budget {budget:,} (balanced): halfway between the interactive pick "
            f"{interactive:,} and the knee {upper.tokens:,}"
        )
        return Bound(BoundKind.midpoint, budget, words)
    if interactive == upper.tokens and upper.tokens <= hidden_top:
        return Bound(upper.kind, interactive, f"token_budget {interactive:,} {upper.words}")
    if interactive == lower.tokens and lower.tokens > hidden_top:
        return Bound(lower.kind, interactive, f"token_budget {interactive:,} {lower.words}")
    words = (
        f"token_budget {interactive:,} (interactive): the largest budget whose slowest step "
        f"stays within {HIDDEN_PREFILL_TOLERANCE:.0%} of the smallest budget's (slowest step "
        f"{format_duration_s(f.slowest_step_s(interactive))}, at the smallest budget "
        f"{format_duration_s(f.slowest_step_s(f.floor_budget))})"
    )
    return Bound(BoundKind.hidden_prefill, interactive, words)


def judge(
    frame: StepFrame,
    slo: ServiceLevel,
    prompt: int | None,
    lower: Bound,
    upper: Bound,
    step_problems: tuple[str | None, str | None, str | None],
) -> str | None:
    """Step 5: None when the SLOs can all be met; else which collide and what to change.
    Strict SLOs raise `Infeasible` instead."""
    seqs_problem, upper_problem, lower_problem = step_problems
    problems = [p for p in (seqs_problem,) if p is not None]
    # Once one decode alone breaks ITL, that ITL's bound says nothing new.
    if upper_problem is not None and not problems:
        problems.append(upper_problem)
    if lower_problem is not None:
        problems.append(lower_problem)
    if lower.tokens > upper.tokens and not problems and prompt is not None:
        if upper.kind is BoundKind.itl_step:
            claim = f"ITL {_target(slo.itl_p99_s)} needs B <= {upper.tokens:,}"
        else:
            claim = f"the {_basis(frame.model)} threshold caps B at {upper.tokens:,}"
        problems.append(
            f"{claim} on {frame.gpu}; TTFT {_target(slo.ttft_p99_s)} at {_tokens_k(prompt)}-token "
            "prompts "
            f"needs B >= {lower.tokens:,}"
        )
    if not problems:
        return None
    message = "; ".join(problems) + f": {FIX}"
    if slo.strict:
        raise Infeasible(message)
    return message


def check_engine_slowdown(factor: float, flag: str) -> float:
    """`factor` when it is one the step model can be slowed by (1 to `MAX_ENGINE_SLOWDOWN`),
    else InvalidSpec naming `flag`: a factor under 1 would price steps faster than the GPU's
    datasheet allows."""
    if not (math.isfinite(factor) and 1.0 <= factor <= MAX_ENGINE_SLOWDOWN):
        raise InvalidSpec(
            f"{flag} {factor:g}: must be a factor from 1 to {MAX_ENGINE_SLOWDOWN:g} (1: the "
            "engines run at the profile's price; faster engines could beat the GPU's datasheet)"
        )
    return factor


def check_inputs(slo: ServiceLevel, hints: WorkloadHints) -> None:
    """Refuse what no step can work with, naming the field and the fix."""
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
    if hints.token_budget is not None and hints.token_budget < 1:
        raise InvalidSpec(f"maxNumBatchedTokens must be at least 1, got {hints.token_budget}")


def largest_where(low: int, high: int, ok: Callable[[int], bool]) -> int | None:
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


def _target(value_s: float | None) -> str:
    return "(none)" if value_s is None else format_duration_s(value_s)


def _calibrated(profile: GPUProfile) -> str | None:
    record = profile.calibration
    if record is None:
        return None
    return (
        f"profile measured by tokenpilot calibrate on {record.date} ({record.grid} grid, "
        f"{record.engine}, model {record.model})"
    )


def _basis(model: StepModel) -> str:
    return "measured" if model.measured else "estimated from the datasheet"


def _tokens_k(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else f"{tokens:,}"


__all__ = [
    "Recommendation",
    "ServiceLevel",
    "WorkloadHints",
    "choose_max_num_seqs",
    "judge",
    "lower_bound",
    "pick_budget",
    "recommend",
    "step_frame",
    "upper_bound",
]
