"""`hpa`: the Kubernetes HPA on vLLM's running requests per replica, via a metrics adapter.

The metric is `vllm:num_requests_running` as a Pods metric with an AverageValue target (served
from Prometheus by prometheus-adapter), evaluated every 15 s with the default tolerance and
behavior (see `hpa_algorithm`). The target comes from sizing: the running requests one replica
carries while meeting the SLOs at the trace's peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot_lab.fleet.policies.base import ScaleChoice
from tokenpilot_lab.fleet.policies.hpa_algorithm import (
    HPA_SYNC_PERIOD_S,
    HpaBehavior,
    pods_metric_recommendation,
)
from tokenpilot_lab.fleet.view import FleetView


@dataclass(slots=True)
class HpaPolicy:
    target_running_per_replica: float
    min_replicas: int
    max_replicas: int
    name: str = "hpa"
    interval_s: float = HPA_SYNC_PERIOD_S
    source: MetricsSourceType = MetricsSourceType.prometheus
    _behavior: HpaBehavior = field(init=False)

    def __post_init__(self) -> None:
        self._behavior = HpaBehavior(self.min_replicas, self.max_replicas)

    def decide(self, view: FleetView) -> ScaleChoice:
        samples = [p.num_requests_running or 0.0 for p in view.pods.values()]
        num_missing = max(0, view.spec_replicas - len(samples))
        recommended, why = pods_metric_recommendation(
            view.spec_replicas, samples, num_missing, self.target_running_per_replica
        )
        desired = self._behavior.apply(view.now_s, view.spec_replicas, recommended)
        return ScaleChoice(desired, f"{why}; recommends {recommended}, behavior gives {desired}")
