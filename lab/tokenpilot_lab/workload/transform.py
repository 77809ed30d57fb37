"""Reshaping a trace in time: stretch or compress it, cut a window out of it, or lay copies of it
over each other."""

from __future__ import annotations

import random
from dataclasses import replace

from tokenpilot_lab.workload.trace import Trace, TraceError, TraceRequest


def scale_time(trace: Trace, factor: float) -> Trace:
    """Multiply every arrival time and the duration by `factor` (> 0)."""
    if factor <= 0:
        raise TraceError(f"time scale must be > 0, got {factor}", source=trace.name)
    requests = tuple(replace(r, arrival_s=r.arrival_s * factor) for r in trace.requests)
    return replace(trace, requests=requests, duration_s=trace.duration_s * factor)


def scale_rate(trace: Trace, factor: float) -> Trace:
    """Replay `factor` times faster: the same requests, arrivals compressed, duration / factor.

    This is the usual meaning of `--rate x2` in trace replay; it keeps the mix of request
    sizes and the shape of the load, and shortens the run.
    """
    if factor <= 0:
        raise TraceError(f"rate scale must be > 0, got {factor}", source=trace.name)
    scaled = scale_time(trace, 1.0 / factor)
    return replace(scaled, name=f"{trace.name} x{factor:g}")


def window(trace: Trace, from_s: float = 0.0, to_s: float | None = None) -> Trace:
    """The requests arriving in [from_s, to_s), re-based to start at 0."""
    end_s = trace.duration_s if to_s is None else to_s
    if from_s < 0 or end_s <= from_s:
        raise TraceError(
            f"window [{from_s}, {end_s}) is empty or negative; need 0 <= from < to",
            source=trace.name,
        )
    requests = tuple(
        replace(r, arrival_s=r.arrival_s - from_s)
        for r in trace.requests
        if from_s <= r.arrival_s and (r.arrival_s < end_s or to_s is None)
    )
    return replace(trace, requests=requests, duration_s=end_s - from_s)


def overlay(trace: Trace, copies: int, *, seed: int, jitter_s: float = 5.0) -> Trace:
    """`copies` copies of `trace` laid over each other: N times the load with the same shape.

    Each copy after the first is shifted by its own offset, drawn uniformly from [0, jitter_s)
    with `seed` (the same seed gives the same trace), and an arrival shifted past the end wraps
    to the start, so the duration and the rate curve stay those of the trace and a burst grows
    about N-fold within a few seconds. Each copy's prefix hashes are renamed apart, so copies
    are different users' prompts: a copy shares prefixes only within itself, as the trace does.
    """
    if copies < 1:
        raise TraceError(f"load must be a whole number of copies >= 1, got {copies}")
    if jitter_s < 0:
        raise TraceError(f"jitter must be >= 0 s, got {jitter_s}")
    if copies == 1:
        return trace
    rng = random.Random(seed)
    span_s = trace.duration_s
    hash_stride = 1 + max((h for r in trace.requests for h in r.hash_ids), default=-1)
    requests: list[TraceRequest] = []
    for copy in range(copies):
        offset_s = 0.0 if copy == 0 else rng.uniform(0.0, jitter_s)
        for request in trace.requests:
            arrival_s = request.arrival_s + offset_s
            if span_s > 0 and arrival_s >= span_s:
                arrival_s -= span_s
            hashes = tuple(h + copy * hash_stride for h in request.hash_ids)
            requests.append(replace(request, arrival_s=arrival_s, hash_ids=hashes))
    requests.sort(key=lambda r: r.arrival_s)
    return replace(trace, name=f"{trace.name} load x{copies}", requests=tuple(requests))


def steady(trace: Trace, *, seed: int) -> Trace:
    """The same requests, in the same order, arriving at the trace's mean rate: a Poisson
    process over the same duration (the order statistics of uniform draws from `seed`). What a
    load test at a fixed rate sends with the production mix: the sizes are the trace's, its
    bursts are gone."""
    if not trace.requests or trace.duration_s <= 0:
        return trace
    rng = random.Random(seed)
    arrivals = sorted(rng.uniform(0.0, trace.duration_s) for _ in trace.requests)
    requests = tuple(
        replace(request, arrival_s=arrival_s)
        for request, arrival_s in zip(trace.requests, arrivals, strict=True)
    )
    return replace(trace, name=f"{trace.name} steady", requests=requests)
