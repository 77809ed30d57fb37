"""Prefill and decode apart (core.disaggregation): each phase's batching, the hand-off's price,
each pool's capacity model and policy, and when the split pays."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.model_shape import model_preset
from tokenpilot.api.vllm_defaults import vllm_batch_defaults
from tokenpilot.core.autoscale.capacity import Demand
from tokenpilot.core.autoscale.spec import replica_model
from tokenpilot.core.disaggregation import (
    DEFAULT_KV_LINK,
    PREFILL_CHUNK_TOLERANCE,
    KvLink,
    PhaseWorkload,
    kv_transfer_s,
    longest_prompt_within,
    phase_models,
    plan_phases,
    prefill_s,
    verdict,
)
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.plan_inputs import PlanInputs, ServiceLevel, WorkloadHints
from tokenpilot.core.roofline import PrefillChunk

CATALOG = load_builtin_catalog()
LLAMA = model_preset("llama-3.1-8b")
SLO = ServiceLevel(itl_p99_s=0.05, ttft_p99_s=2.0)
LONG = PhaseWorkload(12_000, 48_000, 200)
CHAT = PhaseWorkload(1_000, 4_000, 250)
CODE = PhaseWorkload(2_048, 7_400, 28)


def inputs(gpu: str, **hints: object) -> PlanInputs:
    fields: dict[str, object] = {"max_model_len": 131_072}
    fields.update(hints)
    return PlanInputs.of(CATALOG.get(gpu), LLAMA, SLO, WorkloadHints(**fields))  # type: ignore[arg-type]


def test_a_prompts_kv_travels_at_the_links_line_rate() -> None:
    # Llama 3.1 8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB a token.
    assert LLAMA.kv_bytes_per_token == 131_072
    assert kv_transfer_s(LLAMA, 1000, DEFAULT_KV_LINK) == pytest.approx(131_072_000 * 8 / 400e9)
    assert kv_transfer_s(LLAMA, 1000, KvLink(100.0, "test")) == pytest.approx(
        4 * kv_transfer_s(LLAMA, 1000, DEFAULT_KV_LINK)
    )


@pytest.mark.parametrize("gbps", [0.0, -1.0, float("nan"), float("inf")])
def test_a_link_without_a_finite_positive_rate_is_refused(gbps: float) -> None:
    with pytest.raises(InvalidSpec, match="Gb/s"):
        KvLink(gbps, "test")


def test_a_workload_whose_p99_is_under_its_mean_is_refused_naming_the_fix() -> None:
    with pytest.raises(InvalidSpec, match="give a P99 at least the mean"):
        PhaseWorkload(5_000, 4_000, 100)


@pytest.mark.parametrize("gpu", ["H100-80GB", "A100-80GB", "L40S"])
def test_the_prefill_budget_is_the_smallest_chunk_near_the_best_price_per_token(gpu: str) -> None:
    plan = plan_phases(inputs(gpu), inputs(gpu), LONG)
    budget = plan.prefill.token_budget
    seqs = vllm_batch_defaults(CATALOG.get(gpu)).max_num_seqs
    assert budget % 16 == 0 and budget >= seqs
    pricer = phase_models(inputs(gpu), inputs(gpu), plan)[0].pricer
    prompt = round(LONG.mean_prompt_tokens)

    def price(b: int) -> float:
        return prefill_s(pricer, prompt, b)

    assert price(budget) <= price(16_384) * (1 + PREFILL_CHUNK_TOLERANCE)
    if budget // 2 >= -(-seqs // 16) * 16:
        assert price(budget // 2) > price(16_384) * (1 + PREFILL_CHUNK_TOLERANCE)


def test_a_prompts_attention_costs_the_same_however_it_is_chunked() -> None:
    # Chunks of 1,024 and of the whole prompt attend the same pairs; the smaller chunks pay
    # only their extra weight reads and step overheads.
    pricer = phase_models(
        inputs("H100-80GB"),
        inputs("H100-80GB"),
        plan_phases(inputs("H100-80GB"), inputs("H100-80GB"), LONG),
    )[0].pricer
    whole = pricer.iteration_s(0, 0, (PrefillChunk(12_288, 0),))
    assert prefill_s(pricer, 12_288, 16_384) == pytest.approx(whole)
    assert whole < prefill_s(pricer, 12_288, 1024) < whole * 1.5


def test_the_decode_budget_is_vllms_floor_and_the_prefill_pool_gets_the_ttft_left() -> None:
    plan = plan_phases(inputs("H100-80GB", tensor_parallel_size=2), inputs("L40S"), LONG)
    assert plan.decode.token_budget == plan.decode.max_num_seqs == 256  # L40S: vLLM's 256
    assert plan.kv_transfer_s_p99 == pytest.approx(kv_transfer_s(LLAMA, 48_000, DEFAULT_KV_LINK))
    assert plan.prefill_ttft_s == pytest.approx(
        2.0 - plan.kv_transfer_s_p99 - plan.first_decode_step_s
    )
    assert plan.problem is None


def test_a_p99_prompt_no_prefill_replica_can_carry_in_time_is_a_problem_in_words() -> None:
    plan = plan_phases(inputs("L40S"), inputs("L40S"), PhaseWorkload(20_000, 120_000, 100))
    assert plan.problem is not None
    assert "the P99 prompt (120,000 tokens)" in plan.problem and "L40S" in plan.problem


MOONCAKE_LIKE = PhaseWorkload(8_192, 65_536, 300)


@pytest.mark.parametrize("tensor_parallel_size", [1, 2, 4])
def test_the_longest_prompt_within_the_ttft_meets_it_and_one_token_more_does_not(
    tensor_parallel_size: int,
) -> None:
    prefill = inputs("H100-80GB", tensor_parallel_size=tensor_parallel_size)
    plan = plan_phases(prefill, inputs("H100-80GB"), MOONCAKE_LIKE)
    reach = plan.longest_prompt_tokens
    assert reach is not None and 0 < reach < prefill.hints.max_model_len
    budget = plan.prefill.token_budget
    pricer = replica_model(prefill, budget, plan.prefill.max_num_seqs).pricer

    def ttft_s(tokens: int) -> float:
        return (
            prefill_s(pricer, tokens, budget)
            + kv_transfer_s(LLAMA, tokens, DEFAULT_KV_LINK)
            + plan.first_decode_step_s
        )

    assert ttft_s(reach) <= 2.0 < ttft_s(reach + 1)
    within_s = 2.0 - plan.first_decode_step_s
    assert longest_prompt_within(pricer, budget, within_s, prefill, DEFAULT_KV_LINK) == reach


def test_a_wider_prefill_replica_reaches_longer_prompts() -> None:
    reach = [
        plan_phases(
            inputs("H100-80GB", tensor_parallel_size=size), inputs("H100-80GB"), MOONCAKE_LIKE
        ).longest_prompt_tokens
        or 0
        for size in (1, 2, 4, 8)
    ]
    assert reach == sorted(reach) and len(set(reach)) == 4, reach


def test_a_p99_prompt_past_the_replicas_reach_names_the_reach_and_the_width_that_serves_it() -> (
    None
):
    prefill = inputs("H100-80GB", tensor_parallel_size=2)
    plan = plan_phases(prefill, inputs("H100-80GB"), MOONCAKE_LIKE)
    assert plan.longest_prompt_tokens is not None
    assert plan.longest_prompt_tokens < MOONCAKE_LIKE.prompt_p99_tokens
    assert plan.problem is not None
    assert f"prompts up to {plan.longest_prompt_tokens:,} tokens" in plan.problem
    # Four GPUs reach past the P99 (the test above: reach grows with the width); the advice is
    # the narrowest width that does, with its reach.
    four = plan_phases(
        inputs("H100-80GB", tensor_parallel_size=4), inputs("H100-80GB"), MOONCAKE_LIKE
    )
    assert four.problem is None and four.longest_prompt_tokens is not None
    assert four.longest_prompt_tokens >= MOONCAKE_LIKE.prompt_p99_tokens
    assert (
        f"at tensorParallelSize 4 it would meet it for prompts up to "
        f"{four.longest_prompt_tokens:,}" in plan.problem
    ), plan.problem


def test_without_a_ttft_there_is_no_reach() -> None:
    no_ttft = replace(inputs("H100-80GB"), slo=ServiceLevel(itl_p99_s=0.05, ttft_p99_s=None))
    plan = plan_phases(no_ttft, no_ttft, MOONCAKE_LIKE)
    assert plan.longest_prompt_tokens is None


def test_each_pools_model_answers_to_its_own_slo() -> None:
    plan = plan_phases(inputs("H100-80GB"), inputs("H100-80GB"), LONG)
    prefill, decode = phase_models(inputs("H100-80GB"), inputs("H100-80GB"), plan)
    assert (prefill.itl_slo_s, prefill.ttft_slo_s) == (None, pytest.approx(plan.prefill_ttft_s))
    assert (decode.itl_slo_s, decode.ttft_slo_s) == (0.05, None)
    assert decode.prompts_arrive_computed and not prefill.prompts_arrive_computed


def test_the_decode_pool_prices_no_prefill_of_the_prompts_it_receives() -> None:
    # The same load on the same decode engines: counted as prompts to prefill, a replica
    # carries far fewer requests than with the prompts arriving computed.
    plan = plan_phases(inputs("H100-80GB"), inputs("H100-80GB"), LONG)
    decode = phase_models(inputs("H100-80GB"), inputs("H100-80GB"), plan)[1]
    aggregated = replace(decode, prompts_arrive_computed=False, itl_slo_s=None)
    one = LONG.demand(1.0)
    assert decode.serves(one).ok
    assert not aggregated.serves(LONG.demand(8.0)).ok
    assert decode.serves(LONG.demand(4.0)).ok


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.01, 50.0),
    more=st.floats(1.0, 4.0),
    mean_prompt=st.floats(100, 20_000),
    mean_output=st.floats(1, 2_000),
)
def test_a_phase_pool_never_needs_fewer_replicas_for_more_load(
    rate: float, more: float, mean_prompt: float, mean_output: float
) -> None:
    workload = PhaseWorkload(mean_prompt, round(mean_prompt * 4), mean_output)
    plan = plan_phases(inputs("H100-80GB"), inputs("H100-80GB"), workload)
    for model in phase_models(inputs("H100-80GB"), inputs("H100-80GB"), plan):
        fewer, _ = model.replicas_needed(workload.demand(rate), 256)
        more_load, _ = model.replicas_needed(workload.demand(rate * more), 256)
        assert more_load >= fewer


def test_long_prompts_split_because_one_pool_cannot_meet_both_slos() -> None:
    told = verdict(
        inputs("H100-80GB"), inputs("H100-80GB", tensor_parallel_size=2), inputs("H100-80GB"), LONG
    )
    assert told.pays and not told.aggregated_meets_ttft
    assert told.words.startswith("split: one pool cannot meet both SLOs")


@pytest.mark.parametrize("mix", [CHAT, CODE], ids=["chat", "code"])
def test_short_prompts_stay_in_one_pool(mix: PhaseWorkload) -> None:
    told = verdict(inputs("H100-80GB"), inputs("H100-80GB"), inputs("H100-80GB"), mix)
    assert not told.pays and told.aggregated_meets_ttft
    assert told.words.startswith("one pool:")


def test_a_tensor_parallel_prefill_replica_is_priced_at_all_its_gpus() -> None:
    one = verdict(inputs("H100-80GB"), inputs("H100-80GB"), inputs("H100-80GB"), CHAT)
    two = verdict(
        inputs("H100-80GB"), inputs("H100-80GB", tensor_parallel_size=2), inputs("H100-80GB"), CHAT
    )
    assert two.disaggregated_per_rps > one.disaggregated_per_rps * 0.9


def test_the_demand_of_a_mix_scales_with_its_rate() -> None:
    assert LONG.demand(2.0) == Demand(24_000, 400, 12_000, 200, 48_000)
