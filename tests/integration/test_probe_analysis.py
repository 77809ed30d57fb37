"""The probe's arithmetic on token times: baseline, mixed iterations, recovery."""

from __future__ import annotations

import itertools

import pytest

from tokenpilot.core.interference import ProbeError, ProbeSettings, analyse

SETTINGS = ProbeSettings(url="http://127.0.0.1:1", num_decode=2, num_prefill=4, prefill_len=2048)


def ticks(durations_s: list[float], start_s: float = 0.0) -> list[float]:
    return list(itertools.accumulate(durations_s, initial=start_s))


def gaps(times: list[float]) -> list[tuple[float, float]]:
    return list(itertools.pairwise(times))


@pytest.mark.parametrize(
    ("burst_s", "expected_pct", "expected_mixed"),
    [
        # One full-budget step four times the baseline, then a light tail step.
        ([0.040, 0.010], 300.0, 1),
        # Three heavy steps.
        ([0.030, 0.030, 0.030], 200.0, 3),
        # Absorbed: the burst's only step is barely slower; it is the mixed step.
        ([0.0102], 2.0, 1),
    ],
)
def test_mixed_is_the_mean_of_the_steps_the_burst_slowed(
    burst_s: list[float], expected_pct: float, expected_mixed: int
) -> None:
    durations = [0.010] * 100 + burst_s + [0.010] * 30
    times = ticks(durations)
    burst_start = times[100]
    burst_end = times[100 + len(burst_s)]
    result = analyse(
        [gaps(times), gaps(times)], (0.0, burst_start - 0.05), (burst_start, burst_end), SETTINGS
    )
    assert result.baseline_ms == pytest.approx(10.0)
    assert result.interference_pct == pytest.approx(expected_pct, abs=0.5)
    assert result.num_mixed_iterations == expected_mixed
    assert result.recovery_iterations == 1


def test_recovery_counts_iterations_until_back_at_baseline() -> None:
    durations = [0.010] * 50 + [0.050] + [0.020, 0.0125, 0.010] + [0.010] * 10
    times = ticks(durations)
    result = analyse([gaps(times)], (0.0, times[49]), (times[50], times[51]), SETTINGS)
    # 20 ms and 12.5 ms are still above baseline + 10%; the third is back.
    assert result.recovery_iterations == 3
    assert result.recovery_gaps_ms[:3] == pytest.approx([20.0, 12.5, 10.0])


def test_wall_clock_gaps_are_scaled_back_to_engine_time() -> None:
    times = ticks([0.001] * 50 + [0.004] + [0.001] * 5)
    result = analyse(
        [gaps(times)], (0.0, times[49]), (times[50], times[51]), SETTINGS, seconds_per_unit=10
    )
    assert result.baseline_ms == pytest.approx(10.0)
    assert result.mixed_ms == pytest.approx(40.0)


def test_no_tokens_in_a_window_is_an_error_that_says_which() -> None:
    times = ticks([0.010] * 10)
    with pytest.raises(ProbeError, match="baseline"):
        analyse([gaps(times)], (5.0, 6.0), (0.0, 0.05), SETTINGS)
    with pytest.raises(ProbeError, match="burst"):
        analyse([gaps(times)], (0.0, 0.05), (5.0, 6.0), SETTINGS)


def test_the_baseline_is_the_iterations_just_before_the_burst() -> None:
    # Decode steps grow with the decodes' context: 10 ms at the start of a long baseline,
    # 10.6 ms by the burst. The step that finishes the burst's last few prompt tokens runs
    # 1.2 % over the decode step beside it, but 6 % over the start of the baseline; it is not
    # a mixed step. The full step is 47.5 ms.
    durations = [0.010 * (1 + 0.0002 * i) for i in range(300)]
    local = durations[-1]
    durations += [0.0475, local * 1.012] + [local] * 30
    times = ticks(durations)
    result = analyse([gaps(times)] * 4, (0.0, times[300]), (times[300], times[302]), SETTINGS)
    assert result.baseline_ms == pytest.approx(local * 1000, rel=0.003)
    assert result.num_mixed_iterations == 1
    assert result.mixed_ms == pytest.approx(47.5)
    assert result.interference_pct == pytest.approx((0.0475 / local - 1) * 100, abs=1.0)
    assert result.recovery_iterations == 1


def test_a_late_token_on_one_stream_does_not_move_the_reading() -> None:
    # Wall-clock arrivals: on one of five streams a token of the full step arrives 8 ms late,
    # which lengthens one of its gaps and shortens the next. Per iteration, the median over
    # the streams is still the engine's step.
    durations = [0.010] * 100 + [0.040, 0.010] + [0.010] * 30
    times = ticks(durations)
    late = list(times)
    late[101] += 0.008
    streams = [gaps(times)] * 4 + [gaps(late)]
    window = (times[100], times[102])
    result = analyse(streams, (0.0, times[100]), window, SETTINGS, slowed_margin=0.10)
    assert result.interference_pct == pytest.approx(300.0, abs=0.5)
    assert result.num_mixed_iterations == 1
