"""A forecast that has not yet seen a scale-down window holds the fleet, and says so.

The forecast sizes for the busiest interval of its memory; until it has seen at least the
scale-down window it cannot claim that a smaller fleet is enough (a burst it has not seen yet
may be the one the window exists for). The fleet is kept, and the status names the window and
what the forecast has seen of it, instead of a bare "need N replicas" beside a larger fleet.
"""

from __future__ import annotations

from dataclasses import replace

from _evidence import sized
from autoscale_fleet import TTFT_POLICY, TTFT_REPLICA_MODEL, light_load

from tokenpilot.core.autoscale import History, Mode, Reason, decide
from tokenpilot.core.autoscale.demand import Forecast, LoadPoint, forecast

POLICY = replace(TTFT_POLICY, replica_model=TTFT_REPLICA_MODEL)  # 60 s scale-down window
READY = 12


def outlook_over(seen_s: float) -> Forecast:
    points = [LoadPoint(5.0 * i, 5.0, 5_000.0, 500.0, 2.0) for i in range(1, int(seen_s / 5) + 1)]
    outlook = forecast(points, horizon_s=95.0, attainment=0.99)
    assert outlook is not None
    return outlook


def test_a_forecast_younger_than_the_window_keeps_the_fleet_and_says_why() -> None:
    decision = decide(
        POLICY, History(), sized(POLICY, light_load(30.0), outlook_over(30.0), 30.0), 30.0
    )
    assert decision.desired_replicas == READY
    assert decision.mode is Mode.steady
    assert decision.reason_code is Reason.stabilizing
    assert "the forecast has seen 30 s of the 60 s scale-down window: keeping 12" in (
        decision.reason
    )


def test_once_the_forecast_has_seen_the_window_the_fleet_steps_down_to_it() -> None:
    decision = decide(
        POLICY, History(), sized(POLICY, light_load(120.0), outlook_over(120.0), 120.0), 120.0
    )
    assert decision.mode is Mode.scale_down
    assert decision.reason_code is Reason.model_headroom
    assert decision.desired_replicas < READY
    assert "scale-down window" not in decision.reason
