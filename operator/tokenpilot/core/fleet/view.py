"""What an autoscaler sees of the fleet at one evaluation: replica counts and scraped metrics.

Metrics reach each policy the way its real source delivers them:
- `prometheus` (HPA via an adapter, KEDA's Prometheus scaler): gauges as of the latest scrape,
  so up to one scrape interval old; histograms as bucket increases between scrapes.
- `pods` (AIBrix's metric fetcher, the TokenPilot operator): read from the Ready pods' /metrics
  at the evaluation itself.
Either way latencies are only known through vLLM's histogram buckets, never as exact values.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tokenpilot.core.histogram import Bucket


class MetricsSource(StrEnum):
    prometheus = "prometheus"
    pods = "pods"


@dataclass(frozen=True, slots=True)
class PodSample:
    """One Ready pod's gauges as scraped."""

    num_requests_running: int
    num_requests_waiting: int
    kv_cache_usage: float


@dataclass(frozen=True, slots=True)
class FleetView:
    """The inputs of one scaling evaluation at `now_s`.

    `spec_replicas` counts Ready and starting replicas (not draining ones), as the scale
    subresource's spec.replicas does. `pods` holds the Ready pods that were scraped.
    Histograms are cumulative `(le, count)` increases over the last `window_s`, summed over pods.
    """

    now_s: float
    scraped_at_s: float
    spec_replicas: int
    num_ready: int
    num_starting: int
    pods: tuple[PodSample, ...]
    window_s: float
    ttft_window: tuple[Bucket, ...]
    itl_window: tuple[Bucket, ...]

    @property
    def total_running(self) -> int:
        return sum(p.num_requests_running for p in self.pods)

    @property
    def total_waiting(self) -> int:
        return sum(p.num_requests_waiting for p in self.pods)
