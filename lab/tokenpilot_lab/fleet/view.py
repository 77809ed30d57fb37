"""What an autoscaler sees of the fleet at one evaluation: replica counts and scraped metrics.

Metrics reach each policy the way its real source delivers them:
- `prometheus` (HPA via an adapter, KEDA's Prometheus scaler): the pods' samples as of the
  latest scrape, so up to one scrape interval old.
- `pods` (AIBrix's metric fetcher, the TokenPilot operator's direct source): read from the
  Ready pods' /metrics at the evaluation itself.
Latencies are only available as vLLM's cumulative histogram buckets, never as exact values.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tokenpilot.core.histogram import Bucket


class MetricsDelivery(StrEnum):
    prometheus = "prometheus"
    pods = "pods"


@dataclass(frozen=True, slots=True)
class PodSample:
    """One Ready pod's /metrics at `at_s`: gauges and cumulative `(le, count)` histograms."""

    name: str
    at_s: float
    num_requests_running: int
    num_requests_waiting: int
    kv_cache_usage: float
    ttft_buckets: tuple[Bucket, ...]
    itl_buckets: tuple[Bucket, ...]
    # vLLM's counters: prompt tokens prefilled, of them found in the prefix cache, output
    # tokens generated, requests finished.
    prompt_tokens_total: int = 0
    cached_prompt_tokens_total: int = 0
    output_tokens_total: int = 0
    requests_total: int = 0
    # The ITL histogram's `_sum`, seconds.
    itl_sum_s: float = 0.0


@dataclass(frozen=True, slots=True)
class FleetView:
    """The inputs of one scaling evaluation at `now_s`.

    `spec_replicas` counts Ready and starting replicas (not draining ones), as the scale
    subresource's spec.replicas does. `pods` holds the Ready pods as last scraped.
    """

    now_s: float
    scraped_at_s: float
    spec_replicas: int
    num_ready: int
    num_starting: int
    pods: tuple[PodSample, ...]

    @property
    def total_running(self) -> int:
        return sum(p.num_requests_running for p in self.pods)

    @property
    def total_waiting(self) -> int:
        return sum(p.num_requests_waiting for p in self.pods)
