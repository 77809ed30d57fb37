"""The forecast's memory is read against the trend the whole memory proves: a busy interval
counts by its height over the load around it, brought to the present load, so a proven
decline lets the fleet follow the load down and a burst on a level load is remembered as
before."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest
from _evidence import sized
from autoscale_fleet import TTFT_POLICY, TTFT_REPLICA_MODEL, light_load, prompt_rate_points
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tokenpilot.core.autoscale import History, decide
from tokenpilot.core.autoscale.demand import (
    MAX_TREND_POINTS,
    _coarsened,
    forecast,
    lookback_s,
    memory_trend,
    theil_sen_bounds,
    trend_confidence_z,
)

INTERVAL_S = 5.0
PROMPT_TOKENS_PER_REQUEST = 1_000.0
MEMORY_S = lookback_s(
    scale_down_window_s=300.0, startup_s=90.0, interval_s=INTERVAL_S, attainment=0.99
)
POINTS_PER_MEMORY = round(MEMORY_S / INTERVAL_S)  # 100


def busy_prompt_rate(rates: list[float]) -> float:
    outlook = forecast(prompt_rate_points(rates), horizon_s=95.0, attainment=0.99)
    assert outlook is not None
    return outlook.demand.prompt_tokens_per_s


def request_weighted_99th(rates: list[float]) -> float:
    """The busy rate read from the raw rates: the one where the requests reach 99 %."""
    weighted = sorted(
        (rate, max(1.0, rate * INTERVAL_S / PROMPT_TOKENS_PER_REQUEST)) for rate in rates
    )
    total = sum(weight for _, weight in weighted)
    running = 0.0
    for rate, weight in weighted:
        running += weight
        if running >= 0.99 * total - 1e-9:
            return rate
    return weighted[-1][0]


def noisy(level: list[float], spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [value * (1.0 + spread * rng.uniform(-1.0, 1.0)) for value in level]


def test_a_proven_decline_lets_the_busy_rate_follow_the_load_down():
    # The load halves over the memory (a day's evening), each interval off its line by up to
    # 10 %. Read as rates, the busiest 1 % of requests are the oldest: over 19,000 prompt
    # tokens/s against 10,000 now. Against the decline (its bound nearest zero, so a little
    # less than the true one), each is its height over the line, on today's load.
    line = [20_000.0 - 10_000.0 * i / (POINTS_PER_MEMORY - 1) for i in range(POINTS_PER_MEMORY)]
    rates = noisy(line, 0.1, seed=3)
    assert request_weighted_99th(rates) > 19_000.0
    assert 10_000.0 <= busy_prompt_rate(rates) <= 13_500.0


def test_an_earlier_burst_counts_by_its_height_over_the_load_it_rode_on():
    # On a load that doubled over the memory, a burst of +8,000 over the line 400 s ago is
    # remembered as +8,000 over today's load, not as the 14,000 it read then.
    line = [5_000.0 + 5_000.0 * i / (POINTS_PER_MEMORY - 1) for i in range(POINTS_PER_MEMORY)]
    rates = noisy(line, 0.05, seed=5)
    burst_at = 20
    rates[burst_at] = line[burst_at] + 8_000.0
    rates[burst_at + 1] = line[burst_at + 1] + 8_000.0
    assert request_weighted_99th(rates) < 15_000.0
    assert busy_prompt_rate(rates) >= 0.95 * (line[-1] + 8_000.0)


def test_a_burst_on_a_level_load_is_remembered_whole():
    # Nothing is proven: the burst 400 s ago is the busy rate, as it was.
    rates = noisy([10_000.0] * POINTS_PER_MEMORY, 0.1, seed=9)
    rates[20] = rates[21] = 60_000.0
    assert busy_prompt_rate(rates) == pytest.approx(60_000.0)


def test_a_burst_out_of_a_silence_is_no_decline():
    # The development trace's largest bursts come after silences (50 s of none before the
    # 860 s burst of Azure code x2): the pairs through a few silent points prove nothing.
    rates = [10_000.0] * 60 + [0.0] * 10 + [90_000.0, 90_000.0] + [10_000.0] * 28
    assert busy_prompt_rate(rates) == pytest.approx(90_000.0)


def moves_read_on_level_load(seed: int, points_per_memory: int) -> float:
    """The share of evaluations whose memory (`points_per_memory` intervals of a level load,
    30 % noise) moves its rates, at the memory's level."""
    rng = random.Random(seed)
    series = [
        (INTERVAL_S * index, max(0.0, 1_000.0 * (1.0 + 0.3 * rng.gauss(0.0, 1.0))))
        for index in range(points_per_memory * 4)
    ]
    z = trend_confidence_z(points_per_memory)
    moved = [
        memory_trend(memory, z=z) != 0.0
        for memory in (
            series[end - points_per_memory : end]
            for end in range(points_per_memory, len(series) + 1)
        )
    ]
    return sum(moved) / len(moved)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("points_per_memory", [POINTS_PER_MEMORY, 300])  # 5 s and 1 s intervals
def test_a_level_load_is_read_as_a_trend_in_few_evaluations(seed: int, points_per_memory: int):
    # The test runs at every evaluation over points the memory's evaluations share; its level
    # is set for that family, as the trend's is for a horizon's. At a 1 s interval the memory's
    # 300 points are averaged into runs of three first.
    assert moves_read_on_level_load(seed, points_per_memory) <= 0.05


def test_the_status_names_the_trend_the_memory_was_read_on():
    # The words beside the replicas say the busy rate is not the one read 500 s ago.
    line = [20_000.0 - 10_000.0 * i / (POINTS_PER_MEMORY - 1) for i in range(POINTS_PER_MEMORY)]
    falling = forecast(
        prompt_rate_points(noisy(line, 0.1, seed=3)), horizon_s=95.0, attainment=0.99
    )
    level = forecast(
        prompt_rate_points(noisy([10_000.0] * POINTS_PER_MEMORY, 0.1, seed=3)),
        horizon_s=95.0,
        attainment=0.99,
    )
    assert falling is not None and level is not None
    policy = replace(TTFT_POLICY, replica_model=TTFT_REPLICA_MODEL)
    decision = decide(policy, History(), sized(policy, light_load(600.0), falling, 600.0), 600.0)
    assert "on the load of now, which fell" in decision.reason
    assert "prompt tokens/s over it" in decision.reason
    decision = decide(policy, History(), sized(policy, light_load(600.0), level, 600.0), 600.0)
    assert "on the load of now" not in decision.reason


def _trend_from_every_slope(series: list[tuple[float, float]], z: float) -> float:
    """memory_trend as its docstring defines it: the bound nearest zero of all the slopes."""
    lower, upper = theil_sen_bounds(_coarsened(series, MAX_TREND_POINTS), z=z) or (0.0, 0.0)
    return lower if lower > 0.0 else min(0.0, upper)


_rates = st.one_of(
    st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
    # repeats (ties), a slope that underflows, one that overflows, values that are no rate
    st.sampled_from([0.0, 1.0, 5e-324, 1e300, math.inf, math.nan]),
)


@settings(max_examples=400, deadline=None)
# Points in groups of ten at one time, each group falling and the groups rising: the slopes,
# which leave a group's own pairs out, prove the rise that the rises of all pairs would hide.
@example(
    values=[
        73.8, 64.3, 44.8, 32.4, 36.5, 26.2, 35.4, 10.1, 11.1, 9.3,
        86.3, 64.2, 49.3, 62.2, 50.7, 30.0, 50.4, 47.3, 34.4, 32.1,
        72.4, 83.2, 84.0, 69.4, 54.9, 34.0, 41.4, 42.4, 48.5, 44.7,
        89.1, 98.6, 68.4, 84.2, 67.9, 40.6, 62.8, 44.0, 55.0, 42.7,
    ],
    steps=[5.0 if i % 10 == 0 else 0.0 for i in range(240)],
    trend=0.0,
    z=1.64,
)  # fmt: skip
@given(
    values=st.lists(_rates, min_size=0, max_size=240),
    steps=st.lists(st.sampled_from([5.0, 5.0, 4.9, 1e-9, 0.0, -5.0]), min_size=240, max_size=240),
    trend=st.floats(min_value=-500.0, max_value=500.0),
    z=st.sampled_from([0.0, 1.64, 2.45, 3.0]),
)
def test_the_trend_read_from_signs_is_the_trend_of_every_slope(
    values: list[float], steps: list[float], trend: float, z: float
) -> None:
    """The shortcut that proves no trend from the signs of the rises alone gives the slopes'
    answer exactly: on level and sloped loads, with ties, repeated or backward times, values
    that underflow or overflow a slope."""
    times = list(itertools.accumulate(steps[: len(values)], initial=1_000.0))[1:]
    # A rate that is no number is kept as it is (max(0.0, nan) would make it 0.0).
    series = [
        (t, max(0.0, y + trend * t) if math.isfinite(y) else y)
        for t, y in zip(times, values, strict=True)
    ]
    read, expected = memory_trend(series, z=z), _trend_from_every_slope(series, z)
    assert read == expected or (math.isnan(read) and math.isnan(expected))
