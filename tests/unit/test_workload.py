"""Trace rows to requests, synthetic generators and transforms (pure, no files)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot_lab.workload import (
    ColumnMapping,
    TimeUnit,
    Trace,
    TraceBuilder,
    TraceError,
    TraceRequest,
    bursts,
    diurnal,
    overlay,
    poisson,
    scale_rate,
    scale_time,
    steady,
    window,
)
from tokenpilot_lab.workload.parse import AZURE_LLM_MAPPING, MOONCAKE_MAPPING

GENERIC = ColumnMapping("t", "p", "o", TimeUnit.seconds)


def build(rows: list[dict[str, object]], mapping: ColumnMapping = GENERIC) -> Trace:
    builder = TraceBuilder("trace.csv", mapping)
    for line, row in enumerate(rows, start=2):
        builder.add(row, line)
    return builder.build()


def test_arrivals_are_relative_to_the_first_row_in_each_unit() -> None:
    azure = build(
        [
            {
                "TIMESTAMP": "2023-11-16 18:17:03.9799600",
                "ContextTokens": "10",
                "GeneratedTokens": "2",
            },
            {
                "TIMESTAMP": "2023-11-16 18:17:05.4799600",
                "ContextTokens": "7",
                "GeneratedTokens": "3",
            },
        ],
        AZURE_LLM_MAPPING,
    )
    assert azure.requests == (TraceRequest(0.0, 10, 2), TraceRequest(pytest.approx(1.5), 7, 3))
    mooncake = build(
        [
            {"timestamp": 1000, "input_length": 5, "output_length": 1},
            {"timestamp": 3500, "input_length": 6, "output_length": 9},
        ],
        MOONCAKE_MAPPING,
    )
    assert [r.arrival_s for r in mooncake.requests] == [0.0, 2.5]
    assert mooncake.duration_s == 2.5


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"t": 0, "p": -5, "o": 1}], "line 2: p is negative"),
        ([{"t": 0, "p": 5, "o": -1}], "line 2: o is negative"),
        ([{"t": 0, "p": 5, "o": 1}, {"t": 0, "p": 5, "o": "x"}], "line 3: o='x' is not a whole"),
        ([{"t": 0, "p": 5, "o": 1}, {"t": 0, "p": 1.5, "o": 1}], "line 3: p=1.5 is not a whole"),
        ([{"t": 1, "p": 5, "o": 1}, {"t": 0.5, "p": 5, "o": 1}], "line 3: arrival time goes back"),
        ([{"t": "soon", "p": 5, "o": 1}], "line 2: cannot read t='soon'"),
        ([{"t": 0, "p": 0, "o": 1}], "line 2: p is 0"),
        ([{"t": 0, "p": 5}], "line 2: missing value for 'o'"),
        ([{"t": 0, "p": 5, "o": ""}], "line 2: missing value for 'o'"),
    ],
)
def test_bad_rows_name_the_line(rows: list[dict[str, object]], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        build(rows)


def test_missing_columns_are_named_with_the_fix() -> None:
    builder = TraceBuilder("x.csv", AZURE_LLM_MAPPING)
    with pytest.raises(
        TraceError, match=r"x.csv, line 1: missing column\(s\) GeneratedTokens.*--columns"
    ):
        builder.check_columns(["TIMESTAMP", "ContextTokens"], line=1)


def test_an_empty_trace_is_an_error() -> None:
    with pytest.raises(TraceError, match="empty"):
        TraceBuilder("x.csv", GENERIC).build()


def test_skipped_and_simultaneous_rows_are_counted_not_silent() -> None:
    trace = build(
        [
            {"t": 0, "p": 5, "o": 1},
            {"t": 0, "p": 5, "o": 0},
            {"t": 1, "p": 5, "o": 2},
            {"t": 1, "p": 5, "o": 0},
        ]
    )
    assert trace.num_requests == 2
    assert any("skipped 2 row(s) with 0 output tokens (first at line 3)" in n for n in trace.notes)
    assert any("2 request(s) arrive at the same instant" in n for n in trace.notes)


@pytest.mark.parametrize(
    "make",
    [
        lambda seed: poisson(3.0, 200.0, seed=seed),
        lambda seed: bursts(1.0, 8.0, 200.0, seed=seed, burst_every_s=60, burst_length_s=10),
        lambda seed: diurnal(3.0, 200.0, seed=seed, period_s=100),
    ],
)
def test_generators_are_deterministic_sorted_and_inside_the_span(make) -> None:  # type: ignore[no-untyped-def]
    first, again, other = make(7), make(7), make(8)
    assert first == again
    assert first.requests != other.requests
    arrivals = [r.arrival_s for r in first.requests]
    assert arrivals == sorted(arrivals)
    assert all(0 <= a < first.duration_s for a in arrivals)
    assert all(r.num_prompt_tokens >= 1 and r.num_output_tokens >= 1 for r in first.requests)


def test_bursts_concentrate_arrivals_in_the_burst() -> None:
    trace = bursts(0.5, 10.0, 600.0, seed=1, burst_every_s=100, burst_length_s=10)
    inside = sum(1 for r in trace.requests if r.arrival_s % 100 < 10)
    assert inside > 0.6 * trace.num_requests  # 10 s at 10 rps vs 90 s at 0.5 rps per period


@settings(max_examples=30, deadline=None)
@given(rate=st.floats(0.5, 20.0), seed=st.integers(0, 10_000))
def test_poisson_count_is_near_rate_times_duration(rate: float, seed: int) -> None:
    trace = poisson(rate, 500.0, seed=seed)
    expected = rate * 500.0
    assert abs(trace.num_requests - expected) < 6 * expected**0.5 + 5


def test_rate_scaling_compresses_time_and_keeps_requests() -> None:
    trace = poisson(2.0, 100.0, seed=3)
    faster = scale_rate(trace, 2.0)
    assert faster.duration_s == 50.0
    assert [r.arrival_s * 2 for r in faster.requests] == pytest.approx(
        [r.arrival_s for r in trace.requests]
    )
    assert scale_time(trace, 3.0).duration_s == 300.0
    with pytest.raises(TraceError, match="must be > 0"):
        scale_rate(trace, 0)


def test_window_rebases_and_keeps_only_its_span() -> None:
    trace = Trace("t", tuple(TraceRequest(float(t), 5, 1) for t in range(10)), 9.0)
    cut = window(trace, 3.0, 6.0)
    assert [r.arrival_s for r in cut.requests] == [0.0, 1.0, 2.0]
    assert cut.duration_s == 3.0
    assert window(trace, 5.0).num_requests == 5  # to the end, last arrival included
    with pytest.raises(TraceError, match="empty or negative"):
        window(trace, 6.0, 6.0)


def test_peak_window_finds_the_burst() -> None:
    calm = [TraceRequest(float(t), 100, 10) for t in range(0, 1000, 10)]
    burst = [TraceRequest(600.0 + i * 0.5, 100, 10) for i in range(100)]
    trace = Trace("t", tuple(sorted(calm + burst, key=lambda r: r.arrival_s)), 1000.0)
    start = trace.peak_window_start_s(60.0)
    assert 585.0 <= start <= 600.0


def test_swing_is_the_busiest_whole_window_over_the_calmest() -> None:
    # 5-minute windows of 1, 3 and 4 prompt tokens a request; the last 100 s is not a whole
    # window, so its tall burst does not count.
    rows = [(10.0, 1), (310.0, 3), (620.0, 4), (950.0, 1000)]
    trace = Trace("t", tuple(TraceRequest(t, p, 1) for t, p in rows), 1000.0)
    assert trace.prompt_tokens_swing(300.0) == 4.0
    assert Trace("t", trace.requests[:1], 599.0).prompt_tokens_swing(300.0) is None  # one window
    gap = Trace("t", (TraceRequest(10.0, 5, 1),), 600.0)
    assert gap.prompt_tokens_swing(300.0) is None  # an empty window: no bound
    assert poisson(20.0, 3600.0, seed=1).prompt_tokens_swing(300.0) < 2.0  # flat, as issue 13 says
    assert bursts(1.0, 20.0, 3600.0, seed=1, burst_every_s=900.0).prompt_tokens_swing(300.0) > 2.0


@settings(max_examples=25, deadline=None)
@given(copies=st.integers(1, 6), seed=st.integers(0, 1000))
def test_overlay_multiplies_the_load_and_keeps_the_span_and_shape(copies: int, seed: int) -> None:
    trace = bursts(1.0, 8.0, 600.0, seed=3)
    laid = overlay(trace, copies, seed=seed)
    assert laid.duration_s == trace.duration_s
    assert laid.num_requests == copies * trace.num_requests
    assert [r.arrival_s for r in laid.requests] == sorted(r.arrival_s for r in laid.requests)
    assert overlay(trace, copies, seed=seed) == laid  # deterministic

    def in_bursts(t: Trace) -> int:
        # Shifts are under 5 s: a burst (the first 30 s of each 300 s) stays where it was.
        return sum(1 for r in t.requests if (r.arrival_s % 300.0) < 35.0)

    assert in_bursts(laid) >= copies * in_bursts(trace) * 0.9


def test_overlay_keeps_each_copy_a_different_user_for_the_prefix_cache() -> None:
    trace = Trace(
        "t",
        (TraceRequest(0.0, 1024, 4, (0, 1)), TraceRequest(1.0, 1024, 4, (0, 2))),
        10.0,
        hash_block_tokens=512,
    )
    laid = overlay(trace, 2, seed=0)
    hashes = sorted(r.hash_ids for r in laid.requests)
    assert hashes == [(0, 1), (0, 2), (3, 4), (3, 5)]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 1000))
def test_steady_keeps_the_requests_and_span_and_levels_the_bursts(seed: int) -> None:
    trace = bursts(1.0, 20.0, 600.0, seed=3)
    level = steady(trace, seed=seed)
    assert level.duration_s == trace.duration_s
    sizes = [(r.num_prompt_tokens, r.num_output_tokens) for r in level.requests]
    assert sizes == [(r.num_prompt_tokens, r.num_output_tokens) for r in trace.requests]
    arrivals = [r.arrival_s for r in level.requests]
    assert arrivals == sorted(arrivals)
    assert arrivals[0] >= 0.0
    assert arrivals[-1] <= 600.0
    assert steady(trace, seed=seed) == level  # deterministic

    def busiest_minute(t: Trace) -> int:
        minutes = [0] * 10
        for r in t.requests:
            minutes[min(9, int(r.arrival_s // 60))] += 1
        return max(minutes)

    # The bursts (20 rps for 30 s in each 300 s) are gone: no minute holds much over the mean.
    assert busiest_minute(level) < 0.6 * busiest_minute(trace)
