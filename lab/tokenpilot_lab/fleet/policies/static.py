"""`static-peak`: a fixed fleet, sized for the trace's busiest window (see `fleet.sizing`)."""

from __future__ import annotations

from dataclasses import dataclass

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot_lab.fleet.policies.base import ScaleChoice
from tokenpilot_lab.fleet.view import FleetView


@dataclass(slots=True)
class StaticPolicy:
    replicas: int
    name: str = "static-peak"
    interval_s: float = 60.0
    source: MetricsSourceType = MetricsSourceType.prometheus

    def decide(self, view: FleetView) -> ScaleChoice:
        return ScaleChoice(self.replicas, f"fixed at {self.replicas} replicas")
