"""The demand forecast's memory: a burst counts for as long as the attainment target says."""

from __future__ import annotations

import pytest

from tokenpilot.core.autoscale.demand import (
    MAX_MEMORY_S,
    LoadPoint,
    forecast,
    memory_s,
    remember,
)

INTERVAL_S = 5.0
QUIET_PROMPT_TOKENS = 1_000.0  # per interval
BURST_PROMPT_TOKENS = 25_000.0  # one interval at 25x: a 2 s slice of the Azure code trace


def prompt_rate_after_burst(seconds_since_burst: float, attainment: float) -> float:
    """The forecast's prompt rate `seconds_since_burst` after one busy interval (25 times a
    quiet interval's requests and tokens) in an otherwise steady load."""
    keep_s = memory_s(
        scale_down_window_s=300.0, startup_s=90.0, interval_s=INTERVAL_S, attainment=attainment
    )
    points: tuple[LoadPoint, ...] = ()
    burst_at_s = 600.0
    at_s = 0.0
    while at_s <= burst_at_s + seconds_since_burst:
        burst = at_s == burst_at_s
        point = LoadPoint(
            at_s,
            INTERVAL_S,
            prompt_tokens=BURST_PROMPT_TOKENS if burst else QUIET_PROMPT_TOKENS,
            output_tokens=100.0,
            requests=25.0 if burst else 1.0,
        )
        points = remember(points, point, keep_s)
        at_s += INTERVAL_S
    outlook = forecast(points, horizon_s=95.0, attainment=attainment, backlog_s=2.0)
    assert outlook is not None
    return outlook.demand.prompt_tokens_per_s


def test_memory_is_one_over_the_missable_share_of_intervals_within_its_bounds():
    def at(attainment: float, interval_s: float = INTERVAL_S) -> float:
        return memory_s(
            scale_down_window_s=300.0,
            startup_s=90.0,
            interval_s=interval_s,
            attainment=attainment,
        )

    assert at(0.99) == pytest.approx(500.0)
    assert at(0.9) == 300.0  # the scale-down window is the least
    assert at(0.999) == MAX_MEMORY_S  # 5,000 s, held to an hour
    assert at(1.0) == MAX_MEMORY_S


def test_a_burst_outside_the_scale_down_window_still_counts_at_99_percent():
    burst_rate = BURST_PROMPT_TOKENS / INTERVAL_S
    # 400 s after the burst: out of the 300 s scale-down window, inside the 500 s memory.
    assert prompt_rate_after_burst(400.0, attainment=0.99) >= burst_rate
    # At 90 % the memory is the 300 s window, and the burst is forgotten.
    assert prompt_rate_after_burst(400.0, attainment=0.9) < burst_rate / 10
    # Past the memory, forgotten at 99 % too.
    assert prompt_rate_after_burst(520.0, attainment=0.99) < burst_rate / 10
