"""The tuner's numbered steps one by one, on a step-time model with round figures.

`LinearSteps` prices a step as 20 ms of weights, 1 µs per decode context token read and 11 µs
per prefill token, with a 4,096-token threshold, so each expected figure can be worked out by
hand (the working is in the comments). The property tests in test_tuner.py cover the real GPU
profiles and step model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.llmservice import BatchingProfile, BoundKind, SeqsSource
from tokenpilot.api.model_shape import model_preset
from tokenpilot.api.vllm_defaults import OTHER_GPU_DEFAULTS
from tokenpilot.core.batching import Bound
from tokenpilot.core.capacity import CapacityPlan, plan_capacity
from tokenpilot.core.errors import Infeasible
from tokenpilot.core.plan_inputs import ServiceLevel, WorkloadHints
from tokenpilot.core.roofline import PrefillChunk
from tokenpilot.core.tuner import (
    ITL_HEADROOM,
    StepFrame,
    StepPrices,
    choose_max_num_seqs,
    judge,
    lower_bound,
    pick_budget,
    step_frame,
    upper_bound,
)

CONTEXT = 1000
# vLLM's defaults on a GPU under 70 GiB: a cap of 256 sequences.
GPU = OTHER_GPU_DEFAULTS


@dataclass(frozen=True)
class LinearSteps:
    threshold_tokens: int = 4096
    measured: bool = True

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float:
        num_prefill = sum(chunk.num_new_tokens for chunk in prefill_chunks)
        return 0.020 + 1e-6 * decode_context_tokens + 1.1e-5 * num_prefill

    def describe(self) -> str:
        return "20 ms + 1 us per decode context token + 11 us per prefill token"


PRICES = StepPrices(LinearSteps(), CONTEXT, prompt_tokens=2000)


def capacity(max_concurrency: int) -> CapacityPlan:
    real = plan_capacity(
        load_builtin_catalog().get("H100"), model_preset("llama-3.1-8b"), 1, 0.9, 8192, CONTEXT
    )
    return dataclasses.replace(real, max_concurrency=max_concurrency)


def frame(itl_s: float | None, hints: WorkloadHints, kv_fit: int = 40) -> StepFrame:
    slo = ServiceLevel(itl_s, None)
    limit_s = float("inf") if itl_s is None else itl_s * ITL_HEADROOM
    seqs = choose_max_num_seqs("GPU", PRICES, capacity(kv_fit), limit_s, slo, hints, defaults=GPU)
    return step_frame("GPU", PRICES, limit_s, hints, seqs)


# 1. max_num_seqs and the planned decode batch


@pytest.mark.parametrize(
    ("hints", "max_num_seqs", "source"),
    [
        (WorkloadHints(), 256, SeqsSource.vllm_default),
        (WorkloadHints(max_num_seqs=64), 64, SeqsSource.spec),
        # Every running sequence needs a token of the budget per step.
        (WorkloadHints(token_budget=128), 128, SeqsSource.token_budget),
        (WorkloadHints(token_budget=4096), 256, SeqsSource.vllm_default),
    ],
)
def test_max_num_seqs_is_the_users_cap_or_vllms(
    hints: WorkloadHints, max_num_seqs: int, source: SeqsSource
) -> None:
    seqs = choose_max_num_seqs("GPU", PRICES, capacity(40), 0.04, SLO_50MS, hints, defaults=GPU)
    assert (seqs.max_num_seqs, seqs.source) == (max_num_seqs, source)


SLO_50MS = ServiceLevel(0.05, None)


def test_the_budget_is_sized_for_the_decodes_itl_allows_not_the_cap() -> None:
    # Step limit 40 ms, decode share 36 ms, for n decodes beside the prefill of the smallest
    # budget (256 tokens): 20 ms + n x 1 ms + (256 - n) x 11 us <= 36 ms, so 13 of the 40 that fit.
    seqs = choose_max_num_seqs(
        "GPU", PRICES, capacity(40), 0.04, SLO_50MS, WorkloadHints(), defaults=GPU
    )
    assert (seqs.max_num_seqs, seqs.planned_decodes, seqs.max_decodes) == (256, 13, 40)
    assert "enough for 13" in seqs.words and "autoscaler" in seqs.words
    assert seqs.problem is None


def test_one_sequence_over_the_decode_share_is_a_problem_and_the_smallest_cap() -> None:
    # 20 ms of weights alone is over the 18 ms decode share of a 25 ms ITL target: no cap meets
    # it, and the budget honours ITL as far as it can (vLLM's smallest budget is the cap).
    slo = ServiceLevel(0.025, None)
    seqs = choose_max_num_seqs(
        "GPU", PRICES, capacity(40), 0.02, slo, WorkloadHints(), defaults=GPU
    )
    assert (seqs.max_num_seqs, seqs.source, seqs.planned_decodes) == (16, SeqsSource.itl, 1)
    assert seqs.problem is not None and "even one sequence" in seqs.problem


def test_vllms_cap_comes_down_to_leave_ttfts_prefill_beside_the_decodes() -> None:
    # ITL 30 ms: a 24 ms step limit, 21.6 ms for decode. At vLLM's cap of 256 the smallest step
    # (one decode of 1,000 tokens beside 255 prompt tokens) is 20 + 1 + 2.8 = 23.8 ms: over.
    # TTFT 2 s allows floor(1.6 / 0.024) = 66 steps, so a 2,000-token prompt needs 31 tokens a
    # step. A cap of 16 fits one decode beside 15 prompt tokens (too few); 32 fits one decode
    # beside 31 (20 + 1 + 0.35 = 21.35 ms): the cap is 32.
    slo = ServiceLevel(0.030, 2.0)
    seqs = choose_max_num_seqs(
        "GPU", PRICES, capacity(40), 0.024, slo, WorkloadHints(), defaults=GPU
    )
    assert (seqs.max_num_seqs, seqs.source, seqs.planned_decodes) == (32, SeqsSource.itl, 1)
    assert "lowered to 32" in seqs.words and seqs.problem is None


# 2. upper bound


def test_itl_sets_the_upper_bound_below_the_threshold() -> None:
    # 13 decodes: 33 ms + 11 us per prefill token <= 40 ms gives B <= 649. A looser ITL that
    # plans 14 decodes (its limit is their smallest step over the 0.9 decode share, 40.7 ms)
    # allows only B <= 626, and a tighter ITL never gets more: 624 in 16-token blocks.
    bound, problem = upper_bound(frame(0.05, WorkloadHints()), SLO_50MS)
    assert (bound.kind, bound.tokens, problem) == (BoundKind.itl_step, 624, None)
    assert "a tighter ITL never gets a larger budget" in bound.words


def test_without_an_itl_target_the_threshold_is_the_upper_bound() -> None:
    bound, problem = upper_bound(frame(None, WorkloadHints()), ServiceLevel(None, None))
    assert (bound.kind, bound.tokens, problem) == (BoundKind.step_threshold, 4096, None)


def test_decodes_that_alone_break_itl_are_a_problem() -> None:
    # 16 decodes beside the 592 prefill tokens of the smallest budget a cap of 600 sequences
    # allows (608): 36 ms + 592 x 11 us = 42.5 ms, over the 40 ms step limit. (Step 1 plans
    # fewer decodes than that; this frame is the upper bound's input on its own.)
    frame_16 = StepFrame(
        "GPU", PRICES, 0.04, planned_decodes=16, looser=(), floor_budget=608, max_budget=8192 * 600
    )
    bound, problem = upper_bound(frame_16, SLO_50MS)
    assert (bound.kind, bound.tokens) == (BoundKind.itl_step, 608)
    assert problem is not None and "decodes alone take" in problem


# 3. lower bound


def test_without_a_prompt_length_the_lower_bound_is_max_num_seqs() -> None:
    f = frame(0.05, WorkloadHints())
    bound, problem = lower_bound(
        f, ServiceLevel(0.05, 1.0), None, Bound(BoundKind.itl_step, 368, "")
    )
    assert (bound.kind, bound.tokens, problem) == (BoundKind.max_num_seqs, 256, None)


def test_ttft_sets_the_lower_bound_from_the_steps_a_prompt_may_take() -> None:
    # TTFT 200 ms x 0.8 over 40 ms steps: 4 steps for 2,000 tokens, 500 per step beside 16
    # decodes: 516, rounded up to 528.
    f = frame(0.05, WorkloadHints())
    upper = Bound(BoundKind.itl_step, 368, "")
    bound, problem = lower_bound(f, ServiceLevel(0.05, 0.2), 2000, upper)
    assert (bound.kind, bound.tokens, problem) == (BoundKind.ttft_prefill, 528, None)


def test_a_ttft_shorter_than_one_step_is_a_problem() -> None:
    f = frame(0.05, WorkloadHints())
    upper = Bound(BoundKind.itl_step, 368, "")
    bound, problem = lower_bound(f, ServiceLevel(0.05, 0.03), 2000, upper)
    assert bound.kind is BoundKind.ttft_prefill and bound.tokens > f.max_budget
    assert problem == "TTFT 30 ms is shorter than one step at ITL 50 ms"


# 4. pick


@pytest.mark.parametrize(
    ("objective", "kind", "tokens"),
    [
        # No ITL target, 40 decodes: pure decode at 256 tokens is 62.4 ms; within 5 % of it
        # (65.5 ms) prefill fits 499 tokens beside the decodes, so 528.
        (BatchingProfile.interactive, BoundKind.hidden_prefill, 528),
        # Halfway from 528 to the 1,024 of the upper bound: 776, rounded up to 784.
        (BatchingProfile.balanced, BoundKind.midpoint, 784),
        (BatchingProfile.throughput, BoundKind.itl_step, 1024),
    ],
)
def test_the_objective_places_the_budget_between_the_bounds(
    objective: BatchingProfile, kind: BoundKind, tokens: int
) -> None:
    hints = WorkloadHints(objective=objective)
    lower, upper = Bound(BoundKind.max_num_seqs, 256, ""), Bound(BoundKind.itl_step, 1024, "")
    picked = pick_budget(frame(None, hints), hints, lower, upper)
    assert (picked.kind, picked.tokens) == (kind, tokens)


def test_interactive_is_raised_to_a_lower_bound_above_the_hidden_pick() -> None:
    hints = WorkloadHints(objective=BatchingProfile.interactive)
    lower = Bound(BoundKind.ttft_prefill, 640, "at least 640: TTFT")
    upper = Bound(BoundKind.itl_step, 1024, "")
    picked = pick_budget(frame(None, hints), hints, lower, upper)
    assert (picked.kind, picked.tokens) == (BoundKind.ttft_prefill, 640)


def test_a_budget_the_spec_sets_is_kept_with_the_bounds_in_words() -> None:
    hints = WorkloadHints(token_budget=300)
    lower, upper = Bound(BoundKind.max_num_seqs, 256, ""), Bound(BoundKind.itl_step, 1024, "")
    picked = pick_budget(frame(None, hints), hints, lower, upper)
    assert (picked.kind, picked.tokens) == (BoundKind.spec, 300)
    assert "256 to 1,024" in picked.words


# 5. judge


def test_bounds_that_cross_name_both_slos_and_the_fix() -> None:
    f = frame(0.05, WorkloadHints())
    slo = ServiceLevel(0.05, 0.2)
    lower, upper = Bound(BoundKind.ttft_prefill, 528, ""), Bound(BoundKind.itl_step, 368, "")
    problem = judge(f, slo, 2000, lower, upper, (None, None, None))
    assert problem == (
        "ITL 50 ms needs B <= 368 on GPU; TTFT 200 ms at 2,000-token prompts needs B >= 528: "
        "choose a faster SKU, relax an SLO, or split prefill and decode"
    )
    with pytest.raises(Infeasible, match="needs B >= 528"):
        judge(f, ServiceLevel(0.05, 0.2, strict=True), 2000, lower, upper, (None, None, None))


def test_bounds_in_order_are_no_problem_and_a_step_problem_is_kept() -> None:
    f = frame(0.05, WorkloadHints())
    lower, upper = Bound(BoundKind.max_num_seqs, 256, ""), Bound(BoundKind.itl_step, 368, "")
    assert judge(f, SLO_50MS, None, lower, upper, (None, None, None)) is None
    problem = judge(f, SLO_50MS, None, lower, upper, ("one decode is too slow", None, None))
    assert problem is not None and problem.startswith("one decode is too slow: choose")
