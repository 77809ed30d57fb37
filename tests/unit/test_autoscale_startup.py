"""The forecast's horizon is the service's own start-up: how long its pods took from created to
Ready, as the cluster reports them, and the policy's assumption only until one has been seen."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.adapters.kube.pods import startup_s
from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.plan import STARTUPS_KEPT, StartupMemory, forecast_span

POLICY = AutoscalePolicy(scale_down_stabilization_s=20.0, attainment=0.9)


def test_until_a_pod_is_seen_the_policy_s_start_up_is_assumed() -> None:
    assert StartupMemory().startup_s(90.0) == 90.0
    learned = StartupMemory().add({"llm-a": 6.0, "llm-b": 11.0})
    assert learned.startup_s(90.0) == 11.0  # the slowest of those seen


def test_the_horizon_and_the_lookback_follow_the_start_up() -> None:
    assumed = forecast_span(POLICY, 5.0, 90.0)
    learned = forecast_span(POLICY, 5.0, 6.0)
    assert (assumed.horizon_s, assumed.lookback_s) == (95.0, 90.0)
    # At 90 % the lookback keeps 1 / (1 - 0.9) intervals: 50 s, longer than the start-up.
    assert learned.horizon_s == 11.0 and learned.lookback_s == pytest.approx(50.0)


@given(st.lists(st.floats(0, 600), min_size=1, max_size=40))
def test_the_most_recent_pods_decide_and_a_pod_counts_once(startups: list[float]) -> None:
    memory = StartupMemory()
    for index, seconds in enumerate(startups):
        memory = memory.add({f"pod-{index:03d}": seconds})
        memory = memory.add({f"pod-{index:03d}": 9999.0})  # the same pod again: ignored
    assert memory.startup_s(90.0) == max(startups[-STARTUPS_KEPT:])


def test_a_pod_s_start_up_is_read_from_its_creation_and_ready_times() -> None:
    pod = {
        "metadata": {"creationTimestamp": "2026-12-01T10:00:00Z"},
        "status": {
            "conditions": [
                {
                    "type": "Initialized",
                    "status": "True",
                    "lastTransitionTime": "2026-12-01T10:00:01Z",
                },
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T10:01:32Z"},
            ]
        },
    }
    assert startup_s(pod) == 92.0
    assert startup_s({"metadata": {}, "status": {}}) is None
