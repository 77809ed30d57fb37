"""The workload learned from the engines' own histograms: exact means, P99s to within the
rendered buckets' resolution, a window, and the request count behind them."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.autoscale.observation import Lengths, Served
from tokenpilot.core.autoscale.workload import BIN_S, WINDOW_S, WorkloadMemory
from tokenpilot.core.vllm_metrics import rendered_buckets, token_edges


def lengths(values: list[int], edges: tuple[float, ...]) -> Lengths:
    buckets = [(edge, float(sum(1 for v in values if v <= edge))) for edge in edges]
    return Lengths((*buckets, (math.inf, float(len(values)))), float(sum(values)))


@given(st.integers(64, 131_072))
def test_token_edges_hold_a_p99_to_within_ten_percent_from_64_tokens(max_model_len: int) -> None:
    edges = token_edges(max_model_len)
    assert edges[-1] == max_model_len and list(edges) == sorted(set(edges))
    for lower, upper in itertools.pairwise(edges):
        if lower >= 64:
            assert (upper - lower) / upper <= 0.10


def test_the_slos_are_edges_of_the_latency_buckets() -> None:
    buckets = rendered_buckets(8192, itl_p99_slo_s=0.05, ttft_p99_slo_s=2.0)
    assert 2.0 in buckets["time_to_first_token"] and 0.05 in buckets["inter_token_latency"]


def test_the_learned_workload_is_exact_in_the_mean_and_within_its_bucket_in_the_p99() -> None:
    rng = random.Random(3)
    edges = token_edges(16_384)
    prompts = [rng.randint(4_000, 8_000) for _ in range(600)]
    outputs = [rng.randint(50, 400) for _ in range(600)]
    memory = WorkloadMemory()
    for index in range(0, 600, 10):  # 60 intervals of 5 s, ten requests each
        served = Served(
            lengths(prompts[index : index + 10], edges), lengths(outputs[index : index + 10], edges)
        )
        memory = memory.add(served, 5.0 * index / 10, 5.0)
    learned = memory.learned()
    assert learned is not None and learned.num_requests == 600
    assert learned.prompt is not None and learned.output is not None
    assert learned.prompt.mean == pytest.approx(sum(prompts) / 600)
    exact = sorted(prompts)[math.ceil(0.99 * 600) - 1]
    assert learned.prompt.p99 >= exact >= learned.prompt.p99 * (1 - learned.prompt.p99_resolution)
    assert learned.prompt.p99_resolution <= 0.10
    assert learned.mean_context_tokens == pytest.approx(sum(prompts) / 600 + sum(outputs) / 600 / 2)
    assert learned.arrival_rate_per_s == pytest.approx(600 / 300.0)


def test_the_window_forgets_what_is_older() -> None:
    edges = token_edges(8192)
    memory = WorkloadMemory()
    for at_s in range(0, int(WINDOW_S + 10 * BIN_S), 5):
        memory = memory.add(Served(lengths([1000], edges), lengths([100], edges)), float(at_s), 5.0)
    learned = memory.learned()
    assert learned is not None
    assert learned.window_s <= WINDOW_S + BIN_S
    assert learned.num_requests <= (WINDOW_S + BIN_S) / 5
