"""A token counter that reads NaN or infinite is no demand: found by tests/chaos, where a
Prometheus answering NaN reached the capacity model through the forecast and failed the
evaluation (math.ceil(NaN))."""

from __future__ import annotations

import math

import pytest
from _steps import LinearStep

from tokenpilot.core.autoscale import AutoscalePolicy, Observation
from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.autoscale.loop import ServiceState, step
from tokenpilot.core.autoscale.observation import Current, Load, Now

# A step of 5 ms plus 30 us per token: enough of an engine for the capacity model.
MODEL = ReplicaModel(
    LinearStep(0.005, 30e-6, 30e-6), 512, 64, 100_000, itl_slo_s=0.05, ttft_slo_s=2.0
)
POLICY = AutoscalePolicy(
    min_replicas=1, max_replicas=8, itl_p99_slo_s=0.05, ttft_p99_slo_s=2.0, replica_model=MODEL
)


def reading(at_s: float, load: Load) -> Observation:
    return Observation(
        observed_at_s=at_s,
        spec_replicas=2,
        ready_replicas=2,
        num_pods_expected=2,
        num_pods_scraped=2,
        num_requests_waiting=0.0,
        num_requests_running=4.0,
        itl=None,
        ttft=None,
        window_s=30.0,
        load=load,
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_counter_is_not_remembered_and_the_evaluation_goes_on(bad: float) -> None:
    state = ServiceState(POLICY)
    current = Current(spec_replicas=2, ready_replicas=2)
    good = Load(30.0, 60_000.0, 0.0, 6_000.0, 30.0)
    state, _, _ = step(state, reading(0.0, good), current, Now(0.0, "t0"))
    remembered = state.demand.load
    for field in ("num_prompt_tokens", "num_output_tokens", "num_requests"):
        lying = Load(**{**{f: getattr(good, f) for f in Load.__dataclass_fields__}, field: bad})
        state, decision, _ = step(state, reading(5.0, lying), current, Now(5.0, "t1"))
        assert state.demand.load == remembered
        assert 1 <= decision.desired_replicas <= 8
