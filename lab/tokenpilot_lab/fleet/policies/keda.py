"""`keda`: a KEDA ScaledObject with a Prometheus trigger on the requests in flight.

What KEDA does (keda.sh/docs, "ScaledObject specification", "Scaling Deployments", the
Prometheus scaler), as simulated here:
- KEDA creates an HPA whose External metric is the trigger's query with an AverageValue
  target of `threshold`. The HPA syncs every 15 s (kube-controller-manager's
  --horizontal-pod-autoscaler-sync-period) and, with `useCachedMetrics` false (the default),
  each sync asks KEDA's metrics server, which runs the query against Prometheus then and there:
  the value is Prometheus' latest scrape at the sync. `pollingInterval` (30 s) only drives
  KEDA's own loop, which activates 0 <-> 1 and never runs here (every fleet keeps >= 1).
- The HPA computes ceil(total / threshold) unless within the 0.1 tolerance of spec.replicas,
  with no readiness correction (`GetExternalPerPodMetricReplicas`).
- KEDA copies no `behavior` unless the ScaledObject sets one, so the HPA takes the legacy path:
  scale-up at most max(2 x current, 4) per sync, scale-down to the highest recommendation of the
  last 300 s (`hpa_algorithm`). `cooldownPeriod` governs only the step to zero.
The query is the requests in flight, `sum(vllm:num_requests_running) +
sum(vllm:num_requests_waiting)`, and `threshold` what one replica has in flight at its measured
capacity (`fleet.sizing`), the same procedure that sizes every baseline's target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot_lab.fleet.policies.base import ScaleChoice
from tokenpilot_lab.fleet.policies.hpa_algorithm import (
    HPA_SYNC_PERIOD_S,
    HpaBehavior,
    external_average_recommendation,
)
from tokenpilot_lab.fleet.view import FleetView


@dataclass(slots=True)
class KedaPolicy:
    threshold: float
    min_replicas: int
    max_replicas: int
    name: str = "keda"
    interval_s: float = HPA_SYNC_PERIOD_S
    source: MetricsSourceType = MetricsSourceType.prometheus
    _behavior: HpaBehavior = field(init=False)

    def __post_init__(self) -> None:
        self._behavior = HpaBehavior(self.min_replicas, self.max_replicas, legacy=True)

    def decide(self, view: FleetView) -> ScaleChoice:
        total = float(view.total_running + view.total_waiting)
        recommended, why = external_average_recommendation(
            view.spec_replicas, total, self.threshold
        )
        desired = self._behavior.apply(view.now_s, view.spec_replicas, recommended)
        return ScaleChoice(desired, f"{why}; recommends {recommended}, behavior gives {desired}")
