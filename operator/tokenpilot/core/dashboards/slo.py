"""The SLO arithmetic the rules and dashboards share: windows, burn-rate factors, bucket edges.

An SLO here is a P99 latency target (ITL or TTFT) with an attainment target, e.g. 99% of
inter-token intervals at or under 50 ms. vLLM only exports histograms, so "good" is counted at a
bucket edge: the largest edge at or below the target. That rounds in the strict direction (an
interval of 60 ms under a 70 ms target is counted bad when the edges are 50 and 75 ms), so the
reported attainment never flatters the service. A target below the smallest edge uses the smallest
edge, the only case that rounds up; ``bucket_edge_for`` says which case applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Labels that name one LLMService on every series the rules read or write.
SERVICE_LABELS: tuple[str, ...] = ("namespace", "llmservice")

# The short window every ratio is recorded at; longer windows average it (see rules.py).
BASE_WINDOW = "5m"


@dataclass(frozen=True)
class BurnAlert:
    """One multi-window burn-rate condition: both windows above ``factor`` times the budget."""

    long_window: str
    short_window: str
    factor: float
    for_duration: str
    speed: str  # "fast" or "slow": part of the alert name


# The two conditions of the SRE workbook's multi-window, multi-burn-rate alerting for a 30-day
# budget: 14.4x spends 2% of it in 1 h, 6x spends 5% in 6 h. The short window makes the alert
# stop soon after the burn stops.
BURN_ALERTS: tuple[BurnAlert, ...] = (
    BurnAlert(long_window="1h", short_window="5m", factor=14.4, for_duration="2m", speed="Fast"),
    BurnAlert(long_window="6h", short_window="30m", factor=6.0, for_duration="15m", speed="Slow"),
)

# Every window a ratio is recorded for: the base window plus each alert's windows.
RATIO_WINDOWS: tuple[str, ...] = ("5m", "30m", "1h", "6h")


@dataclass(frozen=True)
class Sli:
    """A latency SLI read from one vLLM histogram and compared with one operator SLO gauge."""

    key: str  # short name used in recorded series: tokenpilot:<key>_p99_seconds:rate5m
    title: str
    histogram: str  # vLLM histogram family, e.g. vllm:inter_token_latency_seconds
    target_gauge: str  # operator gauge with each service's P99 target in seconds
    unit_of_event: str  # what one histogram observation is, for docs and alert text


@dataclass(frozen=True)
class BucketEdge:
    """The histogram edge that stands for a target, and why."""

    edge_s: float
    reason: str


def bucket_edge_for(target_s: float, edges_s: Sequence[float]) -> BucketEdge:
    """The largest finite edge at or below ``target_s``, or the smallest edge if none is.

    >>> bucket_edge_for(0.06, [0.01, 0.025, 0.05, 0.075]).edge_s
    0.05
    """
    finite = sorted(e for e in edges_s if e != float("inf"))
    if not finite:
        raise ValueError("a histogram needs at least one finite bucket edge")
    below = [e for e in finite if e <= target_s]
    if below:
        edge = below[-1]
        if edge == target_s:
            return BucketEdge(edge, f"target {target_s:g} s is a bucket edge")
        return BucketEdge(edge, f"target {target_s:g} s rounded down to the edge {edge:g} s")
    return BucketEdge(
        finite[0], f"target {target_s:g} s is below the smallest edge; using {finite[0]:g} s"
    )


def le_label(edge_s: float) -> str:
    """The ``le`` label value a Python Prometheus client writes for an edge (vLLM uses one).

    Integral edges keep their ``.0`` (``1.0``, ``10.0``); Prometheus 3 normalises classic
    histogram ``le`` values to the same spelling.
    """
    if edge_s == float("inf"):
        return "+Inf"
    return repr(float(edge_s))
