"""Reshaping a trace in time: stretch or compress it, or cut a window out of it."""

from __future__ import annotations

from dataclasses import replace

from tokenpilot_lab.workload.trace import Trace, TraceError


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
