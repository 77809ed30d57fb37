"""`keda`: KEDA's Prometheus scaler on `vllm:num_requests_waiting`, threshold 5.

KEDA (keda.sh/docs, "Scaling Deployments" and the Prometheus scaler) polls the query every
`pollingInterval` (default 30 s) and feeds the HPA it owns an External metric with an
AverageValue target of `threshold` (here 5 waiting requests per replica), so the count follows
the HPA rules (`hpa_algorithm`), including the 300 s scale-down stabilization. `cooldownPeriod`
(default 300 s) governs the step to zero, which never happens here: the fleet keeps
`min_replicas` >= 1 for every policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenpilot_lab.fleet.policies.base import ScaleChoice
from tokenpilot_lab.fleet.policies.hpa_algorithm import (
    HpaBehavior,
    external_average_recommendation,
)
from tokenpilot_lab.fleet.view import FleetView, MetricsDelivery

KEDA_POLLING_INTERVAL_S = 30.0
KEDA_COOLDOWN_PERIOD_S = 300.0
KEDA_WAITING_THRESHOLD = 5.0


@dataclass(slots=True)
class KedaPolicy:
    min_replicas: int
    max_replicas: int
    threshold: float = KEDA_WAITING_THRESHOLD
    name: str = "keda"
    interval_s: float = KEDA_POLLING_INTERVAL_S
    source: MetricsDelivery = MetricsDelivery.prometheus
    _behavior: HpaBehavior = field(init=False)

    def __post_init__(self) -> None:
        self._behavior = HpaBehavior(
            self.min_replicas, self.max_replicas, scale_down_stabilization_s=KEDA_COOLDOWN_PERIOD_S
        )

    def decide(self, view: FleetView) -> ScaleChoice:
        total = float(view.total_waiting)
        recommended, why = external_average_recommendation(
            view.spec_replicas, total, self.threshold
        )
        desired = self._behavior.apply(view.now_s, view.spec_replicas, recommended)
        return ScaleChoice(desired, f"{why}; recommends {recommended}, behavior gives {desired}")
