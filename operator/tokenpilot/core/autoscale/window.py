"""From a short ring of scrapes per pod to one Observation of the service.

Purely data-manipulative: the direct metrics source scrapes and parses; this module turns the
samples into signals. Gauges (waiting, running, KV usage) are read from each pod's latest
scrape. P99s come from the sum over pods of each pod's histogram increase across the window
(`sum by (le) (increase(...[window]))` in PromQL terms); a pod needs two scrapes before its
histogram counts, so the first evaluation after a start has no P99 and decide() holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokenpilot.core.autoscale.observation import LatencyQuantile, Observation
from tokenpilot.core.histogram import Bucket, add, quantile, window_delta

P99 = 0.99


@dataclass(frozen=True, slots=True)
class EngineSample:
    """The figures the autoscaler reads from one scrape of one engine; None if absent."""

    at_s: float
    num_requests_waiting: float | None
    num_requests_running: float | None
    kv_cache_usage: float | None
    itl_buckets: tuple[Bucket, ...] | None
    ttft_buckets: tuple[Bucket, ...] | None


Ring = tuple[EngineSample, ...]


def push(ring: Ring, sample: EngineSample, window_s: float) -> Ring:
    """`ring` plus `sample`, keeping one sample at or before the window's start and all after."""
    samples = (*ring, sample)
    start_s = sample.at_s - window_s
    first = 0
    for index, kept in enumerate(samples):
        if kept.at_s <= start_s:
            first = index
    return samples[first:]


def _latency(rings: Sequence[Ring], field: str) -> tuple[LatencyQuantile | None, float]:
    """P99 of the summed per-pod increases of one histogram, and the longest window used."""
    total: tuple[Bucket, ...] = ()
    window_s = 0.0
    counted = 0
    for ring in rings:
        readings = [(s.at_s, getattr(s, field)) for s in ring if getattr(s, field) is not None]
        if len(readings) < 2:
            continue
        (first_at_s, first), (last_at_s, last) = readings[0], readings[-1]
        total = add(total, window_delta(first, last))
        window_s = max(window_s, last_at_s - first_at_s)
        counted += 1
    if counted == 0:
        return None, 0.0
    estimate = quantile(P99, total)
    if estimate.num_observations <= 0:
        return LatencyQuantile(math.nan, 0.0, None), window_s
    return LatencyQuantile(
        estimate.value, estimate.num_observations, estimate.upper_bound
    ), window_s


def _sum(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return math.fsum(v for v in values if v is not None)


def observe_rings(
    rings: Mapping[str, Ring],
    *,
    observed_at_s: float,
    desired_replicas: int,
    ready_replicas: int,
    num_pods_expected: int,
    problems: Sequence[str] = (),
) -> Observation:
    """The Observation for the pods in `rings` (pod name -> samples, latest last).

    Pods absent from `rings`, or whose latest sample is older than `observed_at_s`, were not
    scraped this time; `problems` should say why.
    """
    fresh = [ring for ring in rings.values() if ring and ring[-1].at_s >= observed_at_s]
    notes = list(problems)
    latest = [ring[-1] for ring in fresh]
    itl, itl_window_s = _latency(fresh, "itl_buckets")
    ttft, ttft_window_s = _latency(fresh, "ttft_buckets")
    if fresh and itl is None:
        notes.append("P99 ITL needs two scrapes of a pod; only one so far")
    kv = [s.kv_cache_usage for s in latest if s.kv_cache_usage is not None]
    return Observation(
        observed_at_s=observed_at_s,
        desired_replicas=desired_replicas,
        ready_replicas=ready_replicas,
        num_pods_expected=num_pods_expected,
        num_pods_scraped=len(fresh),
        num_requests_waiting=_sum([s.num_requests_waiting for s in latest]),
        num_requests_running=_sum([s.num_requests_running for s in latest]),
        itl=itl,
        ttft=ttft,
        kv_cache_usage=max(kv) if kv else None,
        window_s=max(itl_window_s, ttft_window_s),
        problems=tuple(notes),
    )
