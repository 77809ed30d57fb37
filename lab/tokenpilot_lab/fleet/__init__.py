"""The fleet simulator: a trace through N engine replicas under an autoscaling policy.

Pure and in virtual time. `simulate()` runs one policy; `policies` holds the baselines
(static-peak, HPA, KEDA, AIBrix KPA) and the TokenPilot wrapper; `sizing` finds the static
fleet for a trace's peak. Results carry per-request latencies, GPU-hours, cost, scale events
and a timeline for plotting.

Several GPU types: `pool_simulator.simulate_pools` runs one Deployment per pool behind one
balancer, each pool's engines its own GPU's at its own budget and price; `pool_operator` is the
operator's autoscaler and pool split on them, `pool_baselines` an HPA per pool Deployment and a
static split sized per pool, `pool_compare` their set-up on one trace.
"""

from tokenpilot_lab.fleet.config import (
    DEFAULT_BALANCER,
    DEFAULT_COLD_START_S,
    Balancer,
    FleetConfig,
)
from tokenpilot_lab.fleet.results import FleetResult, ScaleEvent, Timeline
from tokenpilot_lab.fleet.simulator import simulate
from tokenpilot_lab.fleet.view import FleetView

__all__ = [
    "DEFAULT_BALANCER",
    "DEFAULT_COLD_START_S",
    "Balancer",
    "FleetConfig",
    "FleetResult",
    "FleetView",
    "ScaleEvent",
    "Timeline",
    "simulate",
]
