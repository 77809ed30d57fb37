"""`engine-sim --rates-in-engine-time`: under --time-scale the counts agree with the latencies.

The engines' latencies are engine seconds; their rates are read over wall-clock seconds. A
reader that relates the two (the autoscaler's capacity model, its measured pace) needs the
rates per engine second too, so every count is exported times 1 / time-scale; a mean (a
histogram's sum over its count) and every gauge are unchanged.
"""

from __future__ import annotations

from tokenpilot.adapters.metrics import parse_metrics
from tokenpilot_lab.engine_sim.metrics import EngineMetrics
from tokenpilot_lab.engine_sim.options import parse


def page(metrics: EngineMetrics) -> dict[str, float]:
    parsed = parse_metrics(metrics.exposition().decode())
    return {
        name: sum(s.value for s in parsed.series(name))
        for name in (
            "vllm:generation_tokens_total",
            "vllm:inter_token_latency_seconds_count",
            "vllm:inter_token_latency_seconds_sum",
            "vllm:num_requests_running",
        )
    }


def served(metrics: EngineMetrics) -> EngineMetrics:
    metrics.generation_tokens.inc(64)
    for _ in range(4):
        metrics.itl.observe(0.02)
    metrics.running.set(3)
    return metrics


def test_counts_are_per_engine_second_and_means_and_gauges_unchanged() -> None:
    as_served = page(served(EngineMetrics("m", 8192)))
    slowed = page(served(EngineMetrics("m", 8192, rates_time_scale=0.1)))
    assert as_served["vllm:generation_tokens_total"] == 64
    assert slowed["vllm:generation_tokens_total"] == 640
    assert slowed["vllm:inter_token_latency_seconds_count"] == 40
    mean = slowed["vllm:inter_token_latency_seconds_sum"] / 40
    assert abs(mean - 0.02) < 1e-12
    assert slowed["vllm:num_requests_running"] == as_served["vllm:num_requests_running"] == 3


def test_the_flag_is_off_unless_asked_for() -> None:
    assert not parse(["m", "--time-scale", "0.1"]).rates_in_engine_time
    assert parse(["m", "--time-scale", "0.1", "--rates-in-engine-time"]).rates_in_engine_time
