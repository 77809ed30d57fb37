"""The interference protocol's analysis, pure: from the token times a probe recorded to how much
a burst of prefills slowed the decode streams beside it (adapters/interference.py runs the
protocol against an engine).

The protocol of the interference study, against any OpenAI-compatible endpoint:
  1. PRIME     start `num_decode` streaming completions and wait until each has a token, then
               let them settle;
  2. BASELINE  watch the decode streams for `baseline_s`;
  3. INJECT    right after a decode token arrives, send `num_prefill` requests of
               `prefill_len` prompt tokens with max_tokens 1, and wait for all of them;
  4. RECOVERY  watch the decode streams for `recovery_s` more;
  5. CLEANUP   close the decode streams (the server frees their KV cache).

Every decode stream gets one token per engine iteration, so the gaps between a stream's
tokens are iteration times seen from outside. The analysis works per iteration: the k-th gap
of every stream in a window is the same engine iteration, so its duration is the median of
those gaps over the streams (one stalled stream or a late token cannot move it). Baseline is
the median of the last `LOCAL_BASELINE_ITERATIONS` iterations that ended before the burst
reached the engine: every decode's context grows by a token per iteration, so a baseline read
seconds earlier is stale by several percent. Mixed is the mean of the iterations that started
after the burst was sent, ended by the time its last request finished, and ran slower than
the baseline by more than a margin (all of them when none did); interference = mixed /
baseline - 1. Recovery counts the iterations after the burst until one is back within 10% of
the baseline. `time_scale` multiplies every gap measured on the wall clock back into engine
time (an engine whose clock runs faster than real time).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

RECOVERY_TOLERANCE = 0.10
_EPS_S = 1e-6


class ProbeError(RuntimeError):
    """The endpoint did not behave as the protocol needs (named step, what to check)."""


class UnmeasurableError(ProbeError):
    """The protocol ran, but a window held no step to time: the engine's steps (or the client's
    reading of them) varied more than the windows allow, as on a busy machine. Worth another
    attempt; the endpoint itself is not at fault."""


@dataclass(frozen=True)
class ProbeSettings:
    url: str
    num_decode: int = 32
    num_prefill: int = 4
    prefill_len: int = 2048
    # Short windows: the baseline needs only its last LOCAL_BASELINE_ITERATIONS iterations,
    # and every second the decodes run adds context (a token per iteration), which makes
    # each later burst read lower than the first.
    settle_s: float = 1.0
    baseline_s: float = 1.0
    recovery_s: float = 1.0
    time_scale: float = 1.0
    model: str | None = None
    decode_max_tokens: int = 4096
    # Context of each decode stream; the study's decodes had about 1-1.5K tokens of context.
    decode_prompt_len: int = 1024
    request_timeout_s: float = 120.0
    # Bursts per condition, each followed by a recovery; the median one is reported, so one
    # burst that met a stalled client or server does not decide the cell.
    num_bursts: int = 1
    # Read the engine's /metrics when the baseline starts, before the burst and after the
    # recovery (the engine's own timings, for an engine that does not stamp its chunks).
    snapshot_metrics: bool = False
    # Runs of the whole protocol, with fresh streams, when one found nothing to time (a stall
    # on a busy machine): one unlucky burst does not fail a grid of minutes, and three in a row
    # say the engine's timings are noise.
    attempts: int = 3


@dataclass
class ProbeResult:
    num_decode: int
    num_prefill: int
    prefill_len: int
    baseline_ms: float
    mixed_ms: float
    recovery_ms: float
    num_mixed_iterations: int
    recovery_iterations: int
    recovery_gaps_ms: list[float] = field(default_factory=list)
    # Mean context of the decode streams when the burst went out (prompt plus tokens so far):
    # a decode step grows with it, so the same burst reads less at a longer context.
    decode_context_tokens: int = 0
    # Whether the figures are the engine's own time stamps (else arrival times).
    engine_stamped: bool = False
    # /metrics texts by phase ("baseline", "burst", "after") with `snapshot_metrics`.
    metrics: dict[str, str] = field(default_factory=dict)

    @property
    def interference_pct(self) -> float:
        return (self.mixed_ms - self.baseline_ms) / self.baseline_ms * 100.0

    def describe(self) -> str:
        return (
            f"{self.num_decode} decodes (context {self.decode_context_tokens}), "
            f"{self.num_prefill} x {self.prefill_len} prefill: "
            f"baseline {self.baseline_ms:.1f} ms, mixed {self.mixed_ms:.1f} ms over "
            f"{self.num_mixed_iterations} iterations ({self.interference_pct:+.0f}%), "
            f"recovery {self.recovery_ms:.1f} ms, back within {RECOVERY_TOLERANCE:.0%} after "
            f"{self.recovery_iterations} iteration(s)"
        )


@dataclass
class TokenTimes:
    """When each token arrived (monotonic clock) and, if the server stamps it, when the
    engine made it (engine clock)."""

    arrival: list[float] = field(default_factory=list)
    engine: list[float] = field(default_factory=list)


@dataclass
class BurstTimes:
    sent: float
    done: float
    engine_arrival_s: float | None
    engine_done_s: float | None
    engine_last_arrival_s: float | None = None


# ----- analysis (pure) ----------------------------------------------------------------------


Gap = tuple[float, float]  # (start, end) of one inter-token gap, in seconds

# Iterations the baseline averages. At 10-50 ms a step, 20 iterations are 0.2-1 s: long enough
# to average out arrival jitter, short enough that the decodes' growing context (one token per
# iteration) moves the step time by well under 1 % across them.
LOCAL_BASELINE_ITERATIONS = 20
# A mixed iteration runs slower than the baseline by more than this. A step that only finishes
# a burst's last few prompt tokens runs within about 1-2 % of decode speed (its compute hides
# under the decode's weight read), and the study's mixed times do not count it either.
SLOWED_MARGIN = 0.05
# Arrival times jitter, so from outside an iteration must stand out more to count as slowed.
SLOWED_MARGIN_ARRIVALS = 0.10
_RECOVERY_ITERATIONS = 20


def analyse(
    gaps_per_stream: Sequence[Sequence[Gap]],
    baseline_window: tuple[float, float],
    mixed_window: tuple[float, float],
    settings: ProbeSettings,
    seconds_per_unit: float = 1.0,
    slowed_margin: float = SLOWED_MARGIN,
) -> ProbeResult:
    """Interference from each decode stream's gaps.

    Baseline: the median of the last `LOCAL_BASELINE_ITERATIONS` iterations inside
    `baseline_window` (it should end where the burst reached the engine). Mixed: the
    iterations inside `mixed_window` slower than the baseline by more than `slowed_margin`.
    Recovery: the iterations after it. `seconds_per_unit` turns the gaps' time base into
    engine seconds (the time scale for wall-clock gaps, 1 for engine time stamps)."""
    lo, hi = baseline_window
    mixed_lo, mixed_hi = mixed_window
    before: list[list[float]] = []
    inside: list[list[float]] = []
    after: list[list[float]] = []
    for gaps in gaps_per_stream:
        before.append([b - a for a, b in gaps if lo <= a and b <= hi][-LOCAL_BASELINE_ITERATIONS:])
        inside.append([b - a for a, b in gaps if mixed_lo <= a and b <= mixed_hi])
        after.append([b - a for a, b in gaps if a >= mixed_hi - _EPS_S][:_RECOVERY_ITERATIONS])
    baseline_iterations = per_iteration(before, align_end=True)
    window_iterations = per_iteration(inside)
    if not baseline_iterations:
        raise UnmeasurableError(
            "no decode tokens arrived during the baseline window; is it streaming?"
        )
    if not window_iterations:
        raise UnmeasurableError(
            "no decode iteration fell inside the burst; the burst was too short"
        )
    scale_ms = 1000.0 * seconds_per_unit
    # The median: a recovery iteration of the burst before (or a stall) does not move it.
    baseline = statistics.median(baseline_iterations)
    mixed = [d for d in window_iterations if d > baseline * (1 + slowed_margin)]
    mixed = mixed or window_iterations
    baseline_ms = baseline * scale_ms
    recovery_gaps_ms = [d * scale_ms for d in per_iteration(after)]
    recovery_iterations = next(
        (
            i + 1
            for i, gap in enumerate(recovery_gaps_ms)
            if gap <= baseline_ms * (1 + RECOVERY_TOLERANCE)
        ),
        len(recovery_gaps_ms) + 1,
    )
    return ProbeResult(
        num_decode=settings.num_decode,
        num_prefill=settings.num_prefill,
        prefill_len=settings.prefill_len,
        baseline_ms=baseline_ms,
        mixed_ms=statistics.fmean(mixed) * scale_ms,
        recovery_ms=statistics.fmean(recovery_gaps_ms) if recovery_gaps_ms else float("nan"),
        num_mixed_iterations=len(mixed),
        recovery_iterations=recovery_iterations,
        recovery_gaps_ms=recovery_gaps_ms[:5],
    )


def per_iteration(
    gaps_per_stream: Sequence[Sequence[float]], align_end: bool = False
) -> list[float]:
    """The duration of each iteration: the median over the streams of their k-th gap (counted
    from the end with `align_end`). An index that fewer than half the streams reach is left
    out, so one stream with an extra gap at a window's edge adds no iteration."""
    streams = [list(reversed(g)) if align_end else list(g) for g in gaps_per_stream if g]
    if not streams:
        return []
    out = []
    for i in range(max(len(g) for g in streams)):
        column = [g[i] for g in streams if len(g) > i]
        if 2 * len(column) < len(streams):
            break
        out.append(statistics.median(column))
    return out[::-1] if align_end else out


def analyse_burst(
    streams: Sequence[TokenTimes],
    baseline_start: float,
    burst: BurstTimes,
    settings: ProbeSettings,
) -> ProbeResult:
    """One burst, in engine time when the server stamps it, else in arrival time. The
    baseline runs from `baseline_start` (monotonic clock) to the burst."""
    result = _analyse_burst(streams, baseline_start, burst, settings)
    tokens_before = [sum(1 for a in s.arrival if a <= burst.sent) for s in streams]
    context = settings.decode_prompt_len + statistics.fmean(tokens_before)
    stamped = burst.engine_arrival_s is not None and all(s.engine for s in streams)
    return replace(result, decode_context_tokens=round(context), engine_stamped=stamped)


def _analyse_burst(
    streams: Sequence[TokenTimes],
    baseline_start: float,
    burst: BurstTimes,
    settings: ProbeSettings,
) -> ProbeResult:
    if burst.engine_arrival_s is not None and all(s.engine for s in streams):
        # Engine time: the window runs from the burst's arrival at the engine to its last
        # token; the baseline from the first token stamped after `baseline_start` to it.
        gaps = [list(itertools.pairwise(s.engine)) for s in streams]
        starts = [
            e
            for s in streams
            for c, e in zip(s.arrival, s.engine, strict=False)
            if c >= baseline_start
        ]
        if not starts:
            raise UnmeasurableError("no decode tokens arrived during the baseline window")
        assert burst.engine_done_s is not None
        mixed = (burst.engine_arrival_s, burst.engine_done_s + _EPS_S)
        return analyse(gaps, (min(starts), burst.engine_arrival_s), mixed, settings)
    gaps = [list(itertools.pairwise(s.arrival)) for s in streams]
    typical = statistics.median(b - a for g in gaps for a, b in g[-50:]) if gaps else 0.0
    # The burst goes out just after a decode token: the gaps that start with that step's
    # tokens are the first that can carry it (on a slow engine the burst can fit inside one
    # of them, and a window starting at the send would then hold no gap at all). A token that
    # lands within half a typical gap of the burst's end came with it.
    released = max((a for s in streams for a in s.arrival if a <= burst.sent), default=burst.sent)
    mixed = (released - typical / 2, burst.done + typical / 2)
    return analyse(
        gaps,
        (baseline_start, released),
        mixed,
        settings,
        settings.time_scale,
        SLOWED_MARGIN_ARRIVALS,
    )


def format_heatmap(
    results: Sequence[ProbeResult], measured: dict[tuple[int, int], str] | None = None
) -> str:
    """Rows of num_prefill, columns of prefill_len; measured figures beside when given."""
    lens = sorted({r.prefill_len for r in results})
    rows = sorted({r.num_prefill for r in results})
    by_cell = {(r.num_prefill, r.prefill_len): r for r in results}
    width = 16 if measured else 8
    lines = ["num_prefill \\ len " + "".join(f"{n:>{width}}" for n in lens)]
    for row in rows:
        cells = []
        for n in lens:
            result = by_cell.get((row, n))
            text = f"{result.interference_pct:+.0f}%" if result else "-"
            if measured is not None:
                text = f"{text} ({measured.get((row, n), '?')})"
            cells.append(f"{text:>{width}}")
        lines.append(f"{row:>17} " + "".join(cells))
    return "\n".join(lines)
