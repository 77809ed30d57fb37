"""The status's figures at the precision they are known, so a steady service's status is not
rewritten at every evaluation for digits nobody can act on."""

from __future__ import annotations

import random
import re
from dataclasses import replace

from autoscale_fleet import TTFT_POLICY, TTFT_REPLICA_MODEL, light_load
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.autoscale.figures import approx
from tokenpilot.core.autoscale.freshness import STATUS_REFRESH_S
from tokenpilot.core.autoscale.loop import ApplyStatus, ServiceState, step
from tokenpilot.core.autoscale.observation import Current, Load, Now

POLICY = replace(TTFT_POLICY, replica_model=TTFT_REPLICA_MODEL)


def test_figures_read_as_people_write_them() -> None:
    assert approx(438_578) == "440,000"
    assert approx(3_549) == "3,500"
    assert approx(0.482) == "0.48"
    assert approx(0.0103) == "0.010"
    assert approx(9.96) == "10"
    assert approx(1.83) == "1.8"
    assert approx(0.0) == "0"


@given(st.floats(min_value=1e-6, max_value=1e12) | st.floats(min_value=-1e12, max_value=-1e-6))
def test_a_figure_keeps_two_significant_digits_and_is_within_5_percent(value: float) -> None:
    text = approx(value)
    shown = float(text.replace(",", ""))
    assert abs(shown - value) <= 0.05 * abs(value) * (1 + 1e-9)
    digits = re.sub(r"[^0-9]", "", text).lstrip("0").rstrip("0")
    assert len(digits) <= 2


def test_a_steady_service_is_not_rewritten_for_noise_in_its_counters() -> None:
    """20,000 prompt tokens/s with 0.2 % of noise each interval: once the forecast's memory
    (500 s) is full, the status says the same, so the operator applies nothing more after the
    refresh that brings its words up to the full memory."""
    rng = random.Random(0)
    state, replicas, applied_at = ServiceState(POLICY, interval_s=5.0), 1, []
    for index in range(300):
        at_s = 5.0 * (index + 1)
        noise = 1 + rng.uniform(-0.002, 0.002)
        load = Load(5.0, 100_000.0 * noise, 0.0, 10_000.0 * noise, 100.0)
        observation = replace(light_load(at_s, ready=replicas), load=load)
        current = Current(spec_replicas=replicas, ready_replicas=replicas)
        state, decision, actions = step(state, observation, current, Now(at_s, f"t{index}"))
        replicas = decision.desired_replicas
        if any(isinstance(action, ApplyStatus) for action in actions):
            applied_at.append(at_s)
    assert "forecast 20,000 prompt" in decision.reason
    assert "of the last 500 s" in decision.reason
    assert [at_s for at_s in applied_at if at_s > 500.0 + STATUS_REFRESH_S] == []
