"""The demand to size for: the load of the recent past and its trend, over the startup horizon.

Each evaluation adds one point, the engines' counters over the interval since the previous one
(prompt tokens to prefill, output tokens, requests). From the points of the last `lookback_s`
(the scale-down window, and long enough to hold a burst as rare as the attainment target
allows) `forecast` derives the demand a fleet asked for now must serve:

- **Busy intervals, weighted by requests.** Arrivals come in bursts shorter than any startup,
  so the fleet must already hold what a busy interval needs. Intervals are sorted by their
  prompt rate and weighted by the requests in them; the rate at which the weight reaches the
  attainment target is the one to keep up with (at 99 %, the interval holding the busiest 1 % of
  requests may be left to queue). The output rate is taken the same way.
- **On the load of now.** A burst comes back on the load of its day, so before the busy
  interval is read each remembered rate is moved along the trend the whole memory proves
  (`memory_trend`, `at_present_level`), to the present: on a level load, bursts included,
  nothing moves; on an evening's decline the morning's rates stop holding the fleet for the
  whole memory.
- **Trend.** The growth the rates of the last `horizon_s` (the startup time) prove, times the
  horizon: what will have arrived by the time a replica asked for now is Ready. The slope is
  Theil-Sen's (the median of the slopes between every two points) taken at the lower bound of
  its one-sided confidence interval, positive part only. The test is made at every evaluation,
  so the level is set for the family of tests one horizon holds: a false ramp in at most 5 %
  of horizons, not of evaluations (Bonferroni). A burst inside the horizon is a
  few points whose pairwise slopes are outliers to that median, so it is not read as growth
  (the busy interval above already holds it); a ramp moves most pairs and is projected. A
  falling trend is not projected past the present: a replica removed too early costs a whole
  startup to bring back.
- **Mix.** Mean prompt and output per request from the counters' totals over the lookback.
- **Arrivals.** The counters see a prompt once it is prefilled, so in a backlog they show
  what the fleet served. Each interval's prompt rate adds its queue's growth over the
  interval at the mean prompt (`arrived_prompt_tokens_per_s`): the load that arrived, which is
  what comes back, not the shortfall of the fleet that happened to serve it.
- **Records.** Some bursts are taller than anything the memory holds, and no memory of the
  past sizes a fleet for them. Each interval that arrives once the memory is full is measured
  against the forecast that was in force (`Jump`), and those measurements are kept for
  `MAX_MEMORY_S`, longer than the memory. `record_jump` is how far beyond its forecast the load
  went, read at the attainment target and weighted by requests: the height of the records
  this service has shown. An interval's prompt tokens are taken at the memory's share to
  prefill, not its own: a replica that joins with an empty prefix cache prefills what the
  others find cached, work the fleet's growth made, not a burst of load; and an interval that
  drains a queue served a burst already measured when it arrived, so it measures nothing.
  The fleet is then asked to keep up with the forecast times the record height
  (core.autoscale.capacity), not to meet the TTFT SLO at it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

from tokenpilot.core.autoscale.capacity import Demand

# A request's prompt at the tail of the mix, as a multiple of the mean: the P99 over the mean
# of a log-normal with sigma 0.7 (exp(2.326 x 0.7 - 0.7^2 / 2) = 4.0), a prior, not a fit. For
# scale, the traces' own P99 / mean: 3.6 in azure-llm-2023-code.csv (the development trace),
# 4.3 in mooncake-synthetic.jsonl. The engines' counters give the mean; the tail sets how busy
# prefill may be (core.autoscale.capacity).
TAIL_PROMPT_FACTOR = 4.0
# How often a level load may be read as a ramp, per startup horizon. The trend is tested at
# every evaluation and the evaluations of one horizon share most of their points, so at 5 %
# per evaluation a noisy level load shows a false ramp about once in 20 evaluations, each
# buying replicas for a startup. The family of the horizon's k tests is held to 5 % instead
# (Bonferroni: each at 5 % / k; z 2.45, 2.79 and 3.00 at 7, 19 and 37 points).
TREND_FALSE_RAMP_PER_HORIZON = 0.05
# The memory's trend is a slow part of the load, so a memory of more intervals is averaged
# into this many runs of consecutive ones before the pairwise slopes are taken: their number
# grows with the square (4,950 at 100 points, about 1 ms; 44,850 at a 1 s interval's 300).
# A 500 s memory of 5 s intervals is taken whole.
MAX_TREND_POINTS = 100
# The longest the forecast remembers (an attainment of 1 would otherwise remember forever):
# past an hour the load follows the day's pattern, which the trend term tracks, not a burst.
MAX_MEMORY_S = 3600.0


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One interval's load on the whole service."""

    at_s: float
    interval_s: float
    prompt_tokens: float  # to prefill: prefix-cache hits excluded
    output_tokens: float
    requests: float
    waiting: float = 0.0  # requests waiting at the end of the interval, on the whole service
    cached_prompt_tokens: float = 0.0  # prompt tokens found in the prefix cache

    @property
    def requested_prompt_tokens(self) -> float:
        return self.prompt_tokens + self.cached_prompt_tokens

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.interval_s

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.interval_s


@dataclass(frozen=True, slots=True)
class Jump:
    """One interval's prompt rate over the forecast that was in force when it arrived."""

    at_s: float
    ratio: float
    requests: float


@dataclass(frozen=True, slots=True)
class Forecast:
    """The demand to size for, with the figures behind it."""

    demand: Demand
    level: Demand
    growth_prompt_tokens_per_s: float
    num_points: int
    span_s: float
    # The prompt rate's trend over the whole memory, along which its rates were read on the
    # load of now (tokens/s each second; 0.0 where none is proven).
    memory_trend_prompt_tokens_per_s2: float = 0.0
    # How far beyond its forecast the load has gone in the last `MAX_MEMORY_S` (1.0: never by
    # the attainment target's share of the requests); `burst` is `demand` times that.
    record_jump: float = 1.0
    # The share of the memory's prompt tokens that had to be prefilled (the rest were found in
    # the prefix cache); 1.0 for a service without cache hits.
    computed_prompt_share: float = 1.0

    @property
    def burst(self) -> Demand:
        return self.demand.scaled(self.record_jump)


def lookback_s(
    *, scale_down_window_s: float, startup_s: float, interval_s: float, attainment: float
) -> float:
    """How long the forecast remembers load: the scale-down window and the startup horizon,
    and at least 1 / (1 - attainment) evaluation intervals (500 s at 99 % and 5 s), at most
    `MAX_MEMORY_S`.

    The attainment target lets (1 - attainment) of the requests miss. A burst that comes once
    in fewer intervals than 1 / (1 - attainment), with at least its share of the requests, is
    load the target says to serve; a window shorter than that forgets it between two of its
    recurrences, shrinks the fleet, and meets the next one on a cold start."""
    tail = interval_s / (1.0 - attainment) if attainment < 1.0 else MAX_MEMORY_S
    return max(scale_down_window_s, startup_s, min(tail, MAX_MEMORY_S))


def remember(
    points: Sequence[LoadPoint], point: LoadPoint, lookback_s: float
) -> tuple[LoadPoint, ...]:
    """`points` plus `point`, without those older than the lookback."""
    start_s = point.at_s - lookback_s
    return (*(p for p in points if p.at_s > start_s), point)


def jump(
    previous: Forecast | None, point: LoadPoint, *, lookback_s: float, waiting_before: float
) -> Jump | None:
    """`point`'s arrived prompt rate (as the forecast counts it; `waiting_before` the queue at
    the interval's start) over the prompt rate `previous` forecast; None while that forecast
    had not seen a whole memory (a jump over a short memory says the memory is short, not that
    the load has records).

    The interval's prompt tokens are taken at the memory's share to prefill
    (`computed_prompt_share`), not at its own: an engine that joins the fleet starts with an
    empty prefix cache and prefills in full what the others find cached, a jump in work that
    the fleet's growth caused and that does not come back as load. A burst of arrivals, or of
    longer prompts, moves the requested tokens and is measured as before.

    An interval in which the queue shrank is not measured: it served a backlog that arrived
    before it, and that burst was measured as it arrived (the queue's growth, at the mean
    prompt). Its prefilled tokens over the forecast would count it a second time, at whatever
    the backlog's prompts cost to prefill then (on new replicas with cold caches, all of
    them)."""
    if previous is None or previous.span_s < lookback_s - point.interval_s - 1e-9:
        return None
    if point.waiting < waiting_before:
        return None
    sized = previous.demand.prompt_tokens_per_s
    if sized <= 0:
        return None
    at_share = replace(
        point,
        prompt_tokens=point.requested_prompt_tokens * previous.computed_prompt_share,
        cached_prompt_tokens=0.0,
    )
    rate = arrived_prompt_tokens_per_s(at_share, waiting_before, previous.demand.mean_prompt_tokens)
    return Jump(point.at_s, rate / sized, point.requests + point.waiting)


def remember_jump(jumps: Sequence[Jump], new: Jump | None, now_s: float) -> tuple[Jump, ...]:
    """`jumps` plus `new`, without those older than `MAX_MEMORY_S`."""
    kept = tuple(j for j in jumps if j.at_s > now_s - MAX_MEMORY_S)
    return kept if new is None else (*kept, new)


def record_jump(jumps: Sequence[Jump], attainment: float) -> float:
    """The jump over the forecast at which the requests, counted from the smallest jump up,
    reach `attainment` of all; at least 1.0 (a load that stayed under its forecast has no
    records to keep up with)."""
    return max(1.0, _weighted_quantile([(j.ratio, j.requests) for j in jumps], attainment))


def forecast(
    points: Sequence[LoadPoint],
    *,
    horizon_s: float,
    attainment: float,
    jumps: Sequence[Jump] = (),
) -> Forecast | None:
    """The demand over the next `horizon_s`, or None before any load was counted.

    The counters count a prompt when it has been prefilled, so in a backlog they show what the
    fleet served, not what arrived. Each interval's prompt rate therefore adds its queue's
    growth since the point before it (none for the oldest point, whose predecessor is
    forgotten)."""
    if not points:
        return None
    requests = sum(p.requests for p in points)
    prompt = sum(p.prompt_tokens for p in points)
    requested = sum(p.requested_prompt_tokens for p in points)
    output = sum(p.output_tokens for p in points)
    span_s = sum(p.interval_s for p in points)
    if requests <= 0 or span_s <= 0:
        return None
    mean_prompt, mean_output = prompt / requests, output / requests
    now_s = points[-1].at_s
    recent = [p for p in points if p.at_s > now_s - horizon_s]
    z = trend_confidence_z(len(recent))
    prompt_slope = proven_slope([(p.at_s, p.prompt_tokens_per_s) for p in recent], z=z)
    output_slope = proven_slope([(p.at_s, p.output_tokens_per_s) for p in recent], z=z)
    growth_p = max(0.0, prompt_slope) * horizon_s
    growth_d = max(0.0, output_slope) * horizon_s
    # The memory's test is made at every evaluation, over points its evaluations share.
    memory_z = trend_confidence_z(len(points))
    waiting_before = [points[0].waiting, *(p.waiting for p in points[:-1])]
    prompt_series = [
        (p.at_s, arrived_prompt_tokens_per_s(p, before, mean_prompt))
        for p, before in zip(points, waiting_before, strict=True)
    ]
    output_series = [(p.at_s, p.output_tokens_per_s) for p in points]
    prompt_trend = memory_trend(prompt_series, z=memory_z)
    prompt_rates = at_present_level(prompt_series, prompt_trend)
    output_rates = at_present_level(output_series, memory_trend(output_series, z=memory_z))
    weights = [p.requests + p.waiting for p in points]
    busy_p = _weighted_quantile(list(zip(prompt_rates, weights, strict=True)), attainment)
    busy_d = _weighted_quantile(list(zip(output_rates, weights, strict=True)), attainment)

    def demand(prompt_per_s: float, output_per_s: float) -> Demand:
        return Demand(
            prompt_per_s, output_per_s, mean_prompt, mean_output, TAIL_PROMPT_FACTOR * mean_prompt
        )

    return Forecast(
        demand=demand(busy_p + growth_p, busy_d + growth_d),
        level=demand(prompt / span_s, output / span_s),
        growth_prompt_tokens_per_s=growth_p,
        memory_trend_prompt_tokens_per_s2=prompt_trend,
        num_points=len(points),
        span_s=span_s,
        record_jump=record_jump(jumps, attainment) if jumps else 1.0,
        computed_prompt_share=prompt / requested if requested > 0 else 1.0,
    )


def arrived_prompt_tokens_per_s(
    point: LoadPoint, waiting_before: float, mean_prompt_tokens: float
) -> float:
    """The prompt tokens that arrived in `point`'s interval, per second: those prefilled, plus
    the queue's growth from `waiting_before` at the mean prompt (a queue that shrank was
    prefilled from earlier arrivals). A queue that lasts is counted once, when it grows, not
    in every interval it lasts: what it adds beyond that is the shortfall of the fleet that
    served it, not load that comes back."""
    grown = point.waiting - waiting_before
    return max(0.0, point.prompt_tokens_per_s + grown * mean_prompt_tokens / point.interval_s)


def memory_trend(series: Sequence[tuple[float, float]], *, z: float) -> float:
    """The slope of y over t the whole series proves: the Theil-Sen bound nearest zero at `z`
    (the lower bound of a rise, the upper bound of a decline; 0.0 where neither is proven),
    over the series averaged into runs of consecutive points where it is longer than
    `MAX_TREND_POINTS`. A burst is a few points and proves no trend.

    Most loads prove none, and that is known from the signs of the pairwise slopes alone
    (`_neither_bound_proven`), without the slopes themselves; they are taken only where the
    signs allow a proven one."""
    points = _coarsened(series, MAX_TREND_POINTS)
    if _neither_bound_proven(points, z=z):
        return 0.0
    lower, upper = theil_sen_bounds(points, z=z) or (0.0, 0.0)
    return lower if lower > 0.0 else min(0.0, upper)


def _neither_bound_proven(points: Sequence[tuple[float, float]], *, z: float) -> bool:
    """True where `theil_sen_bounds(points, z=z)` is None or holds zero between its bounds.

    The lower bound is the slope at rank k of the sorted N pairwise slopes, so it is above
    zero exactly when at most k slopes are at or below zero; the upper bound, at rank k from
    the top, is below zero exactly when at most k are at or above it. With times strictly
    increasing, a pair's slope has the sign of its rise, and the pairs are counted by rise,
    each point against the sorted values before it (O(n log n), against the N slopes' O(n^2)).
    A quotient that underflows to zero is counted on both sides by the slopes and on one here,
    so this never says "neither" where the slopes would prove one. Times out of order, repeated
    times and values that are not finite leave the answer to the slopes (False)."""
    times = [t for t, _ in points]
    values = [y for _, y in points]
    if not all(math.isfinite(v) for v in (*times, *values)):
        return False
    if any(later <= earlier for earlier, later in itertools.pairwise(times)):
        return False
    n = len(values)
    num_pairs = n * (n - 1) // 2
    rank = _bound_rank(n, num_pairs, z)
    if num_pairs == 0 or rank < 0:
        return True
    before: list[float] = []
    at_or_below = at_or_above = 0
    for y in values:
        at_or_below += len(before) - bisect.bisect_left(before, y)
        at_or_above += bisect.bisect_right(before, y)
        bisect.insort(before, y)
    return at_or_below > rank and at_or_above > rank


def at_present_level(series: Sequence[tuple[float, float]], slope: float) -> list[float]:
    """Each rate of `series` moved along `slope` to the last point's time: its height over the
    load around it, on the load of now. On a level load (slope 0) every rate is kept as read;
    a load that halved over the memory (an evening) does not keep the fleet of its morning for
    the whole memory."""
    if not series:
        return []
    now_s = series[-1][0]
    return [max(0.0, y + slope * (now_s - t)) for t, y in series]


def _coarsened(series: Sequence[tuple[float, float]], max_points: int) -> list[tuple[float, float]]:
    """`series` as the means of runs of `len(series) // max_points` consecutive points (fewer
    than twice `max_points` runs; a memory a point or two over it is not halved)."""
    size = max(1, len(series) // max_points)
    runs = [series[start : start + size] for start in range(0, len(series), size)]
    return [(sum(t for t, _ in run) / len(run), sum(y for _, y in run) / len(run)) for run in runs]


def _weighted_quantile(pairs: Sequence[tuple[float, float]], q: float) -> float:
    """The smallest value whose share of the total weight at or below it reaches q."""
    total = sum(w for _, w in pairs)
    if total <= 0:
        return max((v for v, _ in pairs), default=0.0)
    running = 0.0
    for value, weight in sorted(pairs):
        running += weight
        if running >= q * total - 1e-9:
            return value
    return max(v for v, _ in pairs)


def trend_confidence_z(num_tests: int) -> float:
    """The normal quantile each of `num_tests` one-sided trend tests is made at, so that all of
    them together read a level load as a ramp at most `TREND_FALSE_RAMP_PER_HORIZON` of the
    time (Bonferroni: each at that rate over `num_tests`)."""
    return NormalDist().inv_cdf(1.0 - TREND_FALSE_RAMP_PER_HORIZON / max(1, num_tests))


def proven_slope(series: Sequence[tuple[float, float]], *, z: float) -> float:
    """The slope of y over t that the points prove: the lower one-sided confidence bound, at
    the normal quantile `z`, of the Theil-Sen estimator, the median of the slopes between every
    two points. 0.0 with too few points to prove anything at that level."""
    bounds = theil_sen_bounds(series, z=z)
    return 0.0 if bounds is None else bounds[0]


def theil_sen_bounds(
    series: Sequence[tuple[float, float]], *, z: float
) -> tuple[float, float] | None:
    """The lower and upper one-sided confidence bounds, each at the normal quantile `z`, of the
    Theil-Sen slope of y over t; None with too few points to bound it at that level.

    The lower bound is the order statistic of the sorted pairwise slopes at rank (N - C) / 2,
    the upper one the same rank from the top, with N the number of pairs and
    C = z * sqrt(n (n - 1) (2n + 5) / 18), the standard deviation of Kendall's S under no trend
    (Sen, "Estimates of the regression coefficient based on Kendall's tau", JASA 1968). A few
    outlying points (a burst) move few of the N slopes; a sustained ramp moves most of them."""
    slopes = sorted(
        (y2 - y1) / (t2 - t1)
        for index, (t1, y1) in enumerate(series)
        for t2, y2 in series[index + 1 :]
        if t2 != t1
    )
    rank = _bound_rank(len(series), len(slopes), z)
    if not slopes or rank < 0:
        return None
    return slopes[rank], slopes[len(slopes) - 1 - rank]


def _bound_rank(num_points: int, num_slopes: int, z: float) -> int:
    """The rank (from either end) of the sorted slopes that bounds the Theil-Sen slope at the
    normal quantile `z`: (N - C) / 2, with C = z * sqrt(n (n - 1) (2n + 5) / 18)."""
    n = num_points
    return math.floor((num_slopes - z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18)) / 2)
