"""The demand forecast: a burst counts for as long as the attainment target says, and only a
trend the points prove is projected over the startup horizon."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from autoscale_fleet import prompt_rate_points
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.autoscale.demand import (
    MAX_MEMORY_S,
    LoadPoint,
    arrived_prompt_tokens_per_s,
    forecast,
    lookback_s,
    proven_slope,
    remember,
    trend_confidence_z,
)

INTERVAL_S = 5.0
QUIET_PROMPT_TOKENS = 1_000.0  # per interval
BURST_PROMPT_TOKENS = 25_000.0  # one interval at 25x: a 2 s slice of the Azure code trace


def prompt_rate_after_burst(seconds_since_burst: float, attainment: float) -> float:
    """The forecast's prompt rate `seconds_since_burst` after one busy interval (25 times a
    quiet interval's requests and tokens) in an otherwise steady load."""
    keep_s = lookback_s(
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
    outlook = forecast(points, horizon_s=95.0, attainment=attainment)
    assert outlook is not None
    return outlook.demand.prompt_tokens_per_s


def test_memory_is_one_over_the_missable_share_of_intervals_within_its_bounds():
    def at(attainment: float, interval_s: float = INTERVAL_S) -> float:
        return lookback_s(
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


HORIZON_S = 95.0


def test_a_burst_at_the_end_of_the_horizon_is_not_read_as_growth():
    # 17 quiet intervals, then a burst in the last two: a least-squares slope reads it as a
    # ramp and projects it over the whole horizon; it is the busy interval, held as such.
    rates = [200.0] * 17 + [5_000.0, 5_000.0]
    outlook = forecast(prompt_rate_points(rates), horizon_s=HORIZON_S, attainment=0.99)
    assert outlook is not None
    assert outlook.growth_prompt_tokens_per_s == 0.0
    assert outlook.demand.prompt_tokens_per_s == pytest.approx(5_000.0)


def test_a_sustained_ramp_is_projected_over_the_horizon():
    # From 10,000 to 28,000 prompt tokens/s over 90 s (200 per s each second), each interval
    # off the line by up to 20 %: the forecast adds most of the 19,000 the next 95 s bring.
    noise = [0.2, -0.15, 0.1, -0.2, 0.05, 0.18, -0.1, -0.05, 0.12, -0.18] * 2
    rates = [(10_000.0 + 1_000.0 * i) * (1.0 + noise[i]) for i in range(19)]
    outlook = forecast(prompt_rate_points(rates), horizon_s=HORIZON_S, attainment=0.99)
    assert outlook is not None
    true_growth = 200.0 * HORIZON_S
    assert 0.5 * true_growth <= outlook.growth_prompt_tokens_per_s <= 1.2 * true_growth


def false_ramp_share_of_horizons(points_per_horizon: int, z: float) -> float:
    """On a level load with 30 % noise per interval, the share of startup horizons in which at
    least one evaluation's forecast reads a rising trend (each evaluation tests the last
    `points_per_horizon` intervals at the normal quantile `z`)."""
    rng = random.Random(7)
    num_horizons = 100
    rates = [
        (INTERVAL_S * index, 1_000.0 * (1.0 + 0.3 * rng.gauss(0.0, 1.0)))
        for index in range(points_per_horizon * (num_horizons + 1))
    ]
    ramp_read = [
        proven_slope(rates[end - points_per_horizon : end], z=z) > 0.0
        for end in range(points_per_horizon, len(rates))
    ]
    horizons = [
        ramp_read[start : start + points_per_horizon]
        for start in range(0, num_horizons * points_per_horizon, points_per_horizon)
    ]
    return sum(any(horizon) for horizon in horizons) / len(horizons)


@pytest.mark.parametrize("points_per_horizon", [7, 19])  # cold starts of 30 s and 90 s
def test_a_level_load_is_read_as_a_ramp_in_few_startup_horizons(points_per_horizon: int):
    # At 5 % per evaluation (z 1.645) a false ramp shows in 31 % (7 points) and 36 % (19) of
    # these horizons, each buying replicas for a startup; held per horizon, 4 % and 1 %.
    z = trend_confidence_z(points_per_horizon)
    assert false_ramp_share_of_horizons(points_per_horizon, z) <= 0.05


def test_the_level_of_each_test_falls_with_the_tests_in_a_horizon():
    assert trend_confidence_z(1) == pytest.approx(1.645, abs=1e-3)
    assert trend_confidence_z(7) == pytest.approx(2.45, abs=0.01)  # cold start 30 s
    assert trend_confidence_z(19) == pytest.approx(2.79, abs=0.01)  # 90 s
    assert trend_confidence_z(37) == pytest.approx(3.00, abs=0.01)  # 180 s


@given(
    n=st.integers(min_value=2, max_value=60),
    intercept=st.floats(min_value=0.0, max_value=1e5),
    slope=st.floats(min_value=-1e3, max_value=1e3),
    outlier_at=st.integers(min_value=0, max_value=59),
    outlier=st.floats(min_value=-1e6, max_value=1e6),
)
def test_one_outlier_on_a_line_never_lifts_the_growth_above_the_line(
    n: int, intercept: float, slope: float, outlier_at: int, outlier: float
):
    # A burst is no ramp at any number of points. From 11 points on, at the horizon's level,
    # the bound stays on the line: the n - 1 slopes through the outlier all fall below the
    # bound's rank. With fewer, they can pull it under the line (no growth is the safe side).
    series = [(5.0 * i, intercept + slope * 5.0 * i) for i in range(n)]
    series[outlier_at % n] = (5.0 * (outlier_at % n), outlier)
    proven = proven_slope(series, z=trend_confidence_z(n))
    # The forecast projects the positive part only (0.0 also stands for "nothing proven").
    assert max(0.0, proven) <= max(0.0, slope) + 1e-6 * max(1.0, abs(slope))
    if n >= 11:
        assert proven == pytest.approx(slope, rel=1e-6, abs=1e-6)


def test_too_few_points_prove_no_trend():
    def line(n: int) -> list[tuple[float, float]]:
        return [(5.0 * i, 10.0 * i) for i in range(n)]

    assert proven_slope([], z=trend_confidence_z(0)) == 0.0
    # A perfect line of four points is no proof at the horizon's level; five are.
    assert proven_slope(line(4), z=trend_confidence_z(4)) == 0.0
    assert proven_slope(line(5), z=trend_confidence_z(5)) == 2.0


def test_a_queue_counts_once_as_arrivals_not_in_every_interval_it_lasts():
    # A fleet at its limit serves 10,000 prompt tokens/s while 40 requests of 1,000 tokens
    # wait for 60 s: they arrived in the one interval the queue grew in. Counted in every
    # interval it lasted, the queue would hold the memory at that burst for 12 intervals.
    served = 10_000.0
    points = prompt_rate_points([served] * 100)
    queued = [replace(p, waiting=40.0) if 50 <= index < 62 else p for index, p in enumerate(points)]
    outlook = forecast(queued, horizon_s=95.0, attainment=0.99)
    assert outlook is not None
    mean_prompt = outlook.demand.mean_prompt_tokens
    grew = served + 40.0 * mean_prompt / INTERVAL_S
    assert outlook.demand.prompt_tokens_per_s == pytest.approx(grew)
    # The draining interval prefilled earlier arrivals: it reads what arrived in it.
    assert arrived_prompt_tokens_per_s(queued[62], 40.0, mean_prompt) == pytest.approx(
        served - 40.0 * mean_prompt / INTERVAL_S
    )


def test_arrivals_never_read_below_zero():
    point = LoadPoint(5.0, 5.0, prompt_tokens=1_000.0, output_tokens=10.0, requests=1.0)
    assert (
        arrived_prompt_tokens_per_s(point, waiting_before=100.0, mean_prompt_tokens=1_000.0) == 0.0
    )
