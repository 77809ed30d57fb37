"""The fleet simulator: a trace through N engine replicas under an autoscaling policy.

Pure and in virtual time. `simulate()` runs one policy; `policies` holds the baselines
(static-peak, HPA, KEDA, AIBrix KPA) and the TokenPilot wrapper; `sizing` finds the static
fleet for a trace's peak. Results carry per-request latencies, GPU-hours, cost, scale events
and a timeline for plotting.
"""

from tokenpilot.core.fleet.config import DEFAULT_COLD_START_S, FleetConfig
from tokenpilot.core.fleet.results import FleetResult, ScaleEvent, Timeline
from tokenpilot.core.fleet.simulator import simulate
from tokenpilot.core.fleet.view import FleetView, MetricsSource, PodSample

__all__ = [
    "DEFAULT_COLD_START_S",
    "FleetConfig",
    "FleetResult",
    "FleetView",
    "MetricsSource",
    "PodSample",
    "ScaleEvent",
    "Timeline",
    "simulate",
]
