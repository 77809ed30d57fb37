"""A queue over target in one reading waits for a second reading, but not when the forecast
already asks for more: a burst that builds a queue is not answered later than one that does
not."""

from __future__ import annotations

from dataclasses import replace

from autoscale_fleet import LINEAR_POLICY
from test_autoscale_records import INTERVAL_S, LEVEL, reading, scaled

from tokenpilot.core.autoscale.decision import Mode, Reason
from tokenpilot.core.autoscale.loop import ServiceState, step
from tokenpilot.core.autoscale.observation import Current, Now


def last_decision(loads, waiting_at_end: float):
    state, replicas, decision = ServiceState(LINEAR_POLICY, interval_s=INTERVAL_S), 1, None
    for index, load in enumerate(loads):
        at_s = INTERVAL_S * (index + 1)
        seen = reading(at_s, load, replicas)
        if index == len(loads) - 1:
            seen = replace(seen, num_requests_waiting=waiting_at_end)
        current = Current(spec_replicas=replicas, ready_replicas=replicas)
        state, decision, _ = step(state, seen, current, Now(at_s, f"t{index}"))
        replicas = decision.desired_replicas
    assert decision is not None
    return replicas, decision


def test_a_queue_in_one_reading_scales_up_at_once_when_the_forecast_asks_for_more() -> None:
    before, _ = last_decision([LEVEL] * 20, 0.0)
    target = LINEAR_POLICY.target_queue_per_replica
    replicas, decision = last_decision([LEVEL] * 20 + [scaled(LEVEL, 4.0)], 3 * target * before)
    assert decision.mode is Mode.scale_up
    assert decision.reason_code is Reason.predicted_demand
    assert replicas > before


def test_a_queue_in_one_reading_on_a_level_load_still_waits_for_the_next() -> None:
    before, _ = last_decision([LEVEL] * 20, 0.0)
    target = LINEAR_POLICY.target_queue_per_replica
    replicas, decision = last_decision([LEVEL] * 21, 3 * target * before)
    assert decision.reason_code is Reason.queue_spike
    assert replicas == before
