"""Reading an engine's own timings from its /metrics (real vLLM stamps no chunk), on the
committed capture of vLLM 0.32.0's /metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpilot.adapters.calibration import (
    PREFILL_HISTOGRAM,
    TOKENS_COUNTER,
    counter_total,
    engine_timings,
    histogram_totals,
    kv_capacity_tokens,
)
from tokenpilot.adapters.interference import SNAPSHOT_TIME

CAPTURE = (Path(__file__).parents[1] / "fixtures" / "vllm-metrics-0.32.0.txt").read_text()


def snapshot(taken_s: float, tokens: float, prefill_sum: float, prefill_count: float) -> str:
    """The capture with its token counter and prefill histogram moved to these values."""
    lines = []
    for line in CAPTURE.splitlines():
        if line.startswith(TOKENS_COUNTER + "{"):
            line = f"{line.rsplit(' ', 1)[0]} {tokens}"
        elif line.startswith(PREFILL_HISTOGRAM + "_sum{"):
            line = f"{line.rsplit(' ', 1)[0]} {prefill_sum}"
        elif line.startswith(PREFILL_HISTOGRAM + "_count{"):
            line = f"{line.rsplit(' ', 1)[0]} {prefill_count}"
        lines.append(line)
    return f"{SNAPSHOT_TIME} {taken_s}\n" + "\n".join(lines)


def test_the_capture_gives_the_kv_cache_and_the_counters() -> None:
    assert kv_capacity_tokens(CAPTURE) == 1_048_576
    assert counter_total(CAPTURE, TOKENS_COUNTER) == 56.0
    assert histogram_totals(CAPTURE, PREFILL_HISTOGRAM) == pytest.approx((0.0608612, 4.0))
    assert kv_capacity_tokens("# no vllm here\n") is None


def test_decode_step_from_tokens_over_time_and_burst_step_from_prefill_times() -> None:
    # 8 decodes made 800 tokens in 2 s: 100 steps of 20 ms. Then 4 prompts, 0.3 s of prefill.
    snapshots = {
        "baseline": snapshot(10.0, 1000, 1.0, 8),
        "burst": snapshot(12.0, 1800, 1.0, 8),
        "after": snapshot(13.0, 1900, 1.3, 12),
    }
    decode_s, burst_s = engine_timings(snapshots, num_decode=8, num_prefill=4) or (0, 0)
    assert decode_s == pytest.approx(0.020)
    assert burst_s == pytest.approx(0.075)


def test_counts_that_are_not_the_bursts_give_no_timing() -> None:
    snapshots = {
        "baseline": snapshot(10.0, 1000, 1.0, 8),
        "burst": snapshot(12.0, 1800, 1.0, 8),
        "after": snapshot(13.0, 1900, 1.3, 11),  # a request of the burst has not finished
    }
    assert engine_timings(snapshots, num_decode=8, num_prefill=4) is None
    assert engine_timings({"baseline": snapshots["baseline"]}, 8, 4) is None
