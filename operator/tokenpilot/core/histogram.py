"""Histogram and counter arithmetic on scraped samples, the way Prometheus does it.

Purely data-manipulative. A histogram is a tuple of cumulative buckets `(upper_bound, count)`
sorted by bound and ending with `+Inf`, as the text exposition format carries them. The autoscaler
needs three things from them:

- the increase over a window (later scrape minus earlier scrape, tolerating a counter reset when
  an engine restarts),
- a quantile of that increase by linear interpolation inside the bucket holding the rank (what
  PromQL's `histogram_quantile` returns), with the bucket's edges as hard bounds on the truth,
- rates of plain counters over a series of samples, again with reset handling.

The interpolated quantile always lies in the same bucket as the exact one, so the error is at
most that bucket's width: the `lower_bound`/`upper_bound` fields say so, and the autoscaler's
scale-down test uses the upper bound so coarse buckets never make it think it is calmer than it is.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Bucket = tuple[float, float]
"""One cumulative bucket: (inclusive upper bound, number of observations at or below it)."""


@dataclass(frozen=True, slots=True)
class QuantileEstimate:
    """A quantile read from buckets, with the edges of the bucket the exact value lies in.

    `value` is NaN when the histogram holds no observations (no traffic in the window), which is
    not the same as a missing metric: callers tell them apart through `num_observations`.
    """

    value: float
    lower_bound: float
    upper_bound: float
    num_observations: float


def normalize(buckets: Iterable[Bucket]) -> tuple[Bucket, ...]:
    """Sort by bound, merge duplicate bounds and force cumulative counts to be monotonic.

    Scrapes of several series can disagree by a few observations (buckets are not read
    atomically); Prometheus repairs that by carrying the running maximum forward, and so do we.
    """
    merged: dict[float, float] = {}
    for bound, count in buckets:
        merged[bound] = merged.get(bound, 0.0) + count
    result: list[Bucket] = []
    running = 0.0
    for bound in sorted(merged):
        running = max(running, merged[bound])
        result.append((bound, running))
    return tuple(result)


def add(left: Sequence[Bucket], right: Sequence[Bucket]) -> tuple[Bucket, ...]:
    """Sum two histograms with the same bounds (the `sum by (le)` of several pods)."""
    return normalize([*left, *right])


def window_delta(earlier: Sequence[Bucket], later: Sequence[Bucket]) -> tuple[Bucket, ...]:
    """The observations that arrived between two scrapes of one series.

    A counter that went down means the process restarted between the scrapes; as in PromQL's
    `increase`, everything the new process counted is taken as the increase.
    """
    before = dict(earlier)
    after = normalize(later)
    if any(count < before.get(bound, 0.0) for bound, count in after):
        return after
    return normalize((bound, count - before.get(bound, 0.0)) for bound, count in after)


def quantile(q: float, buckets: Sequence[Bucket]) -> QuantileEstimate:
    """The q-quantile by linear interpolation within the bucket that holds rank q * total.

    Follows `histogram_quantile`: below the lowest bound the lower edge is 0 (or the bound itself
    if it is not positive); a rank in the +Inf bucket returns the highest finite bound; fewer
    than two buckets, no +Inf bucket, or no observations give NaN.
    """
    nan = math.nan
    if math.isnan(q):
        return QuantileEstimate(nan, nan, nan, 0.0)
    if q < 0:
        return QuantileEstimate(-math.inf, -math.inf, -math.inf, 0.0)
    if q > 1:
        return QuantileEstimate(math.inf, math.inf, math.inf, 0.0)
    ordered = normalize(buckets)
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return QuantileEstimate(nan, nan, nan, 0.0)
    total = ordered[-1][1]
    if total <= 0:
        return QuantileEstimate(nan, nan, nan, 0.0)
    rank = q * total
    counts = [count for _, count in ordered]
    index = bisect.bisect_left(counts, rank)
    if index == len(ordered) - 1:
        highest_finite = ordered[-2][0]
        return QuantileEstimate(highest_finite, highest_finite, math.inf, total)
    bound = ordered[index][0]
    if index == 0 and bound <= 0:
        return QuantileEstimate(bound, bound, bound, total)
    start = 0.0 if index == 0 else ordered[index - 1][0]
    below = 0.0 if index == 0 else ordered[index - 1][1]
    in_bucket = ordered[index][1] - below
    fraction = (rank - below) / in_bucket if in_bucket > 0 else 1.0
    return QuantileEstimate(start + (bound - start) * fraction, start, bound, total)


def bucket_upper_bound(bounds: Sequence[float], value: float) -> float:
    """The smallest bucket bound at or above `value`: a hard upper limit on the exact quantile
    when `value` came from `histogram_quantile` over those bounds (used for PromQL results).
    """
    return bucket_edges(bounds, value)[1]


def bucket_edges(bounds: Sequence[float], value: float) -> tuple[float, float]:
    """The lower and upper edge of the bucket that holds `value` (0.0 below the lowest bound,
    +Inf above the highest): the exact quantile lies above the one and at or below the other
    when `value` came from `histogram_quantile` over those bounds."""
    if math.isnan(value):
        return math.nan, math.nan
    ordered = sorted(bounds)
    index = bisect.bisect_left(ordered, value)
    lower = ordered[index - 1] if index > 0 else 0.0
    return lower, (ordered[index] if index < len(ordered) else math.inf)


def counter_increase(samples: Sequence[tuple[float, float]]) -> float:
    """Increase of a counter over `(time_s, value)` samples in time order, across resets."""
    increase = 0.0
    for (_, previous), (_, current) in itertools.pairwise(samples):
        increase += current - previous if current >= previous else current
    return increase


def counter_rate(samples: Sequence[tuple[float, float]]) -> float:
    """Per-second rate of a counter over its samples; NaN with fewer than two samples."""
    if len(samples) < 2:
        return math.nan
    elapsed_s = samples[-1][0] - samples[0][0]
    if elapsed_s <= 0:
        return math.nan
    return counter_increase(samples) / elapsed_s
