"""What one policy's run produced: per-request latencies, GPU time, scale events, a timeline.

Attainment counts a request as good when its TTFT and the P99 of its own inter-token gaps both
meet the SLO; a request the fleet never served (rejected, or still queued when the run ended)
counts as missed. Percentiles across requests use the nearest rank, so they are actual values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of already sorted values by nearest rank; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def request_itl_p99_s(itl_s: Sequence[float]) -> float:
    """P99 of one request's gaps between tokens (0 for a single-token reply)."""
    if not itl_s:
        return 0.0
    if len(itl_s) <= 100:
        return max(itl_s)  # the nearest-rank P99 of 100 or fewer values is the largest
    return nearest_rank(sorted(itl_s), 0.99)


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    time_s: float
    from_replicas: int
    to_replicas: int
    reason: str


@dataclass(frozen=True, slots=True)
class Timeline:
    """Sampled every `FleetConfig.series_interval_s`: replicas asked for and Ready, and the
    requests running and waiting on the engines (exact, not scraped)."""

    time_s: tuple[float, ...]
    spec_replicas: tuple[int, ...]
    ready_replicas: tuple[int, ...]
    num_running: tuple[int, ...]
    num_waiting: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Rollout:
    """The engines moved from one (token budget, max_num_seqs) to another: when the pod
    template changed, when the last old pod went (None: still rolling at the end), and the
    GPU-hours of the pods over spec.replicas meanwhile."""

    started_s: float
    finished_s: float | None
    from_batching: tuple[int, int]
    to_batching: tuple[int, int]
    surge_gpu_hours: float = 0.0


@dataclass(frozen=True, slots=True)
class FleetResult:
    policy: str
    num_requests: int
    num_met: int
    num_rejected: int
    num_unserved: int
    duration_s: float
    ttft_s: tuple[float, ...]  # per served request, in arrival order (NaN if unserved)
    itl_p99_s: tuple[float, ...]  # per served request's own P99 gap (NaN if unserved)
    gpu_hours: float
    cost_usd: float
    scale_events: tuple[ScaleEvent, ...]
    timeline: Timeline
    notes: tuple[str, ...] = ()
    # vLLM's prefix_cache_queries and prefix_cache_hits summed over the replicas, in tokens.
    num_prefix_cache_queries: int = 0
    num_prefix_cache_hits: int = 0
    rollouts: tuple[Rollout, ...] = ()
    # What an operator contender knew and did, for the report (fleet.operator).
    operator: Mapping[str, Any] | None = None

    @property
    def prefix_cache_hit_rate(self) -> float:
        """Prompt tokens found in the prefix cache over those looked up (vLLM's hits over
        queries); NaN when nothing was looked up (prefix caching off)."""
        if not self.num_prefix_cache_queries:
            return math.nan
        return self.num_prefix_cache_hits / self.num_prefix_cache_queries

    @property
    def attainment(self) -> float:
        """Share of requests meeting both SLOs; 1.0 for an empty trace (nothing was missed)."""
        return self.num_met / self.num_requests if self.num_requests else 1.0

    @property
    def servable_attainment(self) -> float:
        """Attainment among the requests the engines accept (not longer than max_model_len):
        what more replicas can improve, so what sizing aims at."""
        servable = self.num_requests - self.num_rejected
        return self.num_met / servable if servable else 1.0

    @property
    def goodput_rps(self) -> float:
        return self.num_met / self.duration_s if self.duration_s > 0 else 0.0

    def latency_quantiles(self) -> dict[str, float]:
        ttft = sorted(v for v in self.ttft_s if not math.isnan(v))
        itl = sorted(v for v in self.itl_p99_s if not math.isnan(v))
        return {
            "ttft_p50_s": nearest_rank(ttft, 0.5),
            "ttft_p99_s": nearest_rank(ttft, 0.99),
            "itl_p50_s": nearest_rank(itl, 0.5),
            "itl_p99_s": nearest_rank(itl, 0.99),
        }

    def summary(self) -> dict[str, float | int]:
        """The figures of the comparison table, attainment as a fraction."""
        return {
            "attainment": self.attainment,
            "goodput_rps": self.goodput_rps,
            **self.latency_quantiles(),
            "gpu_hours": self.gpu_hours,
            "cost_usd": self.cost_usd,
            "scale_events": len(self.scale_events),
        }
