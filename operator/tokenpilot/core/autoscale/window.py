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

from tokenpilot.core.autoscale.observation import (
    LatencyQuantile,
    Lengths,
    Load,
    Observation,
    Served,
)
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
    # vLLM's counters (their `_total` samples), None where the page has none.
    prompt_tokens_total: float | None = None
    cached_prompt_tokens_total: float | None = None
    output_tokens_total: float | None = None
    requests_total: float | None = None
    # The inter-token latency histogram's `_sum` (seconds); its count is the +Inf bucket.
    itl_sum_s: float | None = None
    # The workload: the prompt- and output-length histograms per finished request (cumulative
    # buckets and `_sum`), the prefix cache's lookups in tokens, and the prefill-time histogram's
    # `_sum` (seconds) and `_count`.
    prompt_len_buckets: tuple[Bucket, ...] | None = None
    prompt_len_sum: float | None = None
    output_len_buckets: tuple[Bucket, ...] | None = None
    output_len_sum: float | None = None
    prefix_cache_queries_total: float | None = None
    prefill_sum_s: float | None = None
    prefill_count: float | None = None


Ring = tuple[EngineSample, ...]


@dataclass(frozen=True, slots=True)
class PodScrapes:
    """What the direct source read at `at_s`: a sample per pod that answered, and why the
    others did not (one sentence each). `num_pods_expected` counts the Ready pods it tried."""

    at_s: float
    samples: Mapping[str, EngineSample]
    num_pods_expected: int
    problems: tuple[str, ...] = ()


def observe_scrapes(
    rings: Mapping[str, Ring],
    scrapes: PodScrapes,
    *,
    spec_replicas: int,
    ready_replicas: int,
    window_s: float,
) -> tuple[dict[str, Ring], Observation]:
    """The rings with this evaluation's scrapes pushed on, and the Observation they give.

    A pod that did not answer keeps its ring while the Ready set still has room for it (it may
    answer next time); a pod that left the Ready set drops its ring.
    """
    kept = {
        name: push(rings.get(name, ()), sample, window_s)
        for name, sample in scrapes.samples.items()
    }
    for name, ring in rings.items():
        if name not in kept and len(kept) < scrapes.num_pods_expected:
            kept[name] = ring
    observation = observe_rings(
        {name: kept[name] for name in scrapes.samples},
        observed_at_s=scrapes.at_s,
        spec_replicas=spec_replicas,
        ready_replicas=ready_replicas,
        num_pods_expected=scrapes.num_pods_expected,
        problems=scrapes.problems,
    )
    return kept, observation


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
        estimate.value, estimate.num_observations, estimate.upper_bound, estimate.lower_bound
    ), window_s


def _load(rings: Sequence[Ring]) -> Load | None:
    """The counters' increase between each pod's last two readings, summed over the pods.

    A counter that went down (the engine restarted) counts from zero, as PromQL's increase()
    does; the interval is the longest of the pods' (they are read together). The ITL
    histogram's count and sum count only from pods that export both."""
    totals = [0.0, 0.0, 0.0, 0.0]
    gaps = [0.0, 0.0]
    interval_s = 0.0
    num_pods = 0
    served = Served()
    for ring in rings:
        if len(ring) < 2 or ring[-1].prompt_tokens_total is None:
            continue
        before, after = ring[-2], ring[-1]
        for index, field in enumerate(_COUNTERS):
            totals[index] += _increase(getattr(before, field), getattr(after, field))
        if after.itl_sum_s is not None and after.itl_buckets:
            gaps[0] += _increase(_count(before.itl_buckets), after.itl_buckets[-1][1])
            gaps[1] += _increase(before.itl_sum_s, after.itl_sum_s)
        served = served.plus(_served(before, after))
        interval_s = max(interval_s, after.at_s - before.at_s)
        num_pods += 1
    if num_pods == 0 or interval_s <= 0:
        return None
    prompt, cached, output, requests = totals
    return Load(interval_s, prompt, cached, output, requests, num_pods, gaps[0], gaps[1], served)


def _served(before: EngineSample, after: EngineSample) -> Served:
    """What one pod served between two readings: the requests' lengths, the prefix cache's
    lookups, the prefill times (each family only where the page has it)."""
    return Served(
        prompt_lengths=_lengths(
            before.prompt_len_buckets,
            before.prompt_len_sum,
            after.prompt_len_buckets,
            after.prompt_len_sum,
        ),
        output_lengths=_lengths(
            before.output_len_buckets,
            before.output_len_sum,
            after.output_len_buckets,
            after.output_len_sum,
        ),
        cache_queries=_increase(
            before.prefix_cache_queries_total, after.prefix_cache_queries_total
        ),
        cache_hits=_increase(before.cached_prompt_tokens_total, after.cached_prompt_tokens_total),
        prefill_sum_s=_increase(before.prefill_sum_s, after.prefill_sum_s),
        prefill_count=_increase(before.prefill_count, after.prefill_count),
    )


def _lengths(
    buckets_then: tuple[Bucket, ...] | None,
    sum_then: float | None,
    buckets_now: tuple[Bucket, ...] | None,
    sum_now: float | None,
) -> Lengths | None:
    if not buckets_now or sum_now is None:
        return None
    if not buckets_then or sum_then is None or buckets_now[-1][1] < buckets_then[-1][1]:
        return Lengths(tuple(buckets_now), sum_now)  # the engine restarted: all of it is new
    return Lengths(window_delta(buckets_then, buckets_now), _increase(sum_then, sum_now))


def _increase(then: float | None, now: float | None) -> float:
    if now is None:
        return 0.0
    return now if then is None or now < then else now - then


def _count(buckets: tuple[Bucket, ...] | None) -> float | None:
    return buckets[-1][1] if buckets else None


_COUNTERS = (
    "prompt_tokens_total",
    "cached_prompt_tokens_total",
    "output_tokens_total",
    "requests_total",
)


def _sum(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return math.fsum(v for v in values if v is not None)


def observe_rings(
    rings: Mapping[str, Ring],
    *,
    observed_at_s: float,
    spec_replicas: int,
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
    awaiting = bool(fresh) and all(len(ring) < 2 for ring in fresh)
    if fresh and itl is None:
        notes.append("P99 ITL needs two scrapes of a pod; only one so far")
    kv = [s.kv_cache_usage for s in latest if s.kv_cache_usage is not None]
    return Observation(
        observed_at_s=observed_at_s,
        spec_replicas=spec_replicas,
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
        load=_load(fresh),
        awaiting_second_scrape=awaiting,
    )
