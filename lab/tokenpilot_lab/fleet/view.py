"""What an autoscaler sees of the fleet at one evaluation: replica counts and scraped metrics.

Metrics reach each policy the way its real source delivers them (the API's
`spec.autoscaling.metrics.type`):
- `prometheus` (HPA via an adapter, KEDA's Prometheus scaler): the pods' samples as of the
  latest scrape, so up to one scrape interval old.
- `direct` (AIBrix's metric fetcher, the TokenPilot operator's direct source): read from the
  Ready pods' /metrics at the evaluation itself.
Each pod's page is what the operator's parser reads of it (core.autoscale.window.EngineSample):
latencies only as vLLM's cumulative histogram buckets, never as exact values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tokenpilot.core.autoscale.window import EngineSample


@dataclass(frozen=True, slots=True)
class FleetView:
    """The inputs of one scaling evaluation at `now_s`.

    `spec_replicas` counts Ready and starting replicas (not draining ones), as the scale
    subresource's spec.replicas does. `pods` holds the Ready pods' pages as last scraped, by
    pod name.
    """

    now_s: float
    scraped_at_s: float
    spec_replicas: int
    num_ready: int
    num_starting: int
    pods: Mapping[str, EngineSample]
    # Each Ready replica the run started (not the opening fleet): seconds from created to
    # Ready, by name, as a pod's creation and Ready times say it.
    pod_startups_s: Mapping[str, float] = field(default_factory=dict)
    # Each Ready pod's engine batching, (token budget, max_num_seqs), as its args say.
    batching: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # Whether a rollout of a new pod template is under way (the Progressing condition).
    rolling_out: bool = False

    @property
    def total_running(self) -> float:
        return sum(p.num_requests_running or 0.0 for p in self.pods.values())

    @property
    def total_waiting(self) -> float:
        return sum(p.num_requests_waiting or 0.0 for p in self.pods.values())
