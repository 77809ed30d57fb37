"""Breaches and projections that the fleet size cannot change: every request on its own engine.

With no more requests in flight (running + waiting) than engines, the least-outstanding
balancer gives every request an engine of its own, so each step carries one sequence whatever
the fleet size. A TTFT over its SLO there is the prompt's own prefill (more replicas cannot
shorten it), and a step down that keeps every request on its own engine changes no latency.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from _evidence import sized
from autoscale_fleet import (
    ITL_SLO_S,
    TTFT_POLICY,
    TTFT_REPLICA_MODEL,
    TTFT_SLO_S,
    itl_quantile,
    replay_steady,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tokenpilot.core.autoscale import (
    Evidence,
    History,
    LatencyQuantile,
    Mode,
    Observation,
    Reason,
    decide,
)
from tokenpilot.core.autoscale.demand import LoadPoint, forecast
from tokenpilot.core.autoscale.figures import approx
from tokenpilot.core.histogram import bucket_upper_bound
from tokenpilot.core.vllm_metrics import TTFT_BUCKETS_S

POLICY = TTFT_POLICY
INTERVAL_S = 5.0


def ttft_quantile(p99_s: float) -> LatencyQuantile:
    return LatencyQuantile(p99_s, 200.0, bucket_upper_bound(TTFT_BUCKETS_S, p99_s))


def reading(
    replicas: int,
    *,
    running: float,
    waiting: float = 0.0,
    ttft_p99_s: float = 0.3,
    itl_p99_s: float = 0.012,
    at_s: float = 0.0,
) -> Observation:
    return Observation(
        observed_at_s=at_s,
        spec_replicas=replicas,
        ready_replicas=replicas,
        num_pods_expected=replicas,
        num_pods_scraped=replicas,
        num_requests_waiting=waiting,
        num_requests_running=running,
        itl=itl_quantile(itl_p99_s),
        ttft=ttft_quantile(ttft_p99_s),
        window_s=30.0,
    )


@pytest.mark.parametrize(
    ("observation", "code", "replicas"),
    [
        # L4, long Mooncake prompts: 20 requests on 32 engines, none waiting, TTFT 2.4 s.
        (reading(32, running=20, ttft_p99_s=2.4), Reason.prefill_bound, 32),
        (reading(32, running=32, ttft_p99_s=2.4), Reason.prefill_bound, 32),
        # A request caught between its arrival and the next step, on an idle engine.
        (reading(32, running=20, waiting=1, ttft_p99_s=2.4), Reason.prefill_bound, 32),
        # Engines shared: prefills split the token budget, more replicas spread them.
        (reading(32, running=40, ttft_p99_s=2.4), Reason.ttft_over_slo, 36),
        # More in flight than engines: some requests queue behind others.
        (reading(32, running=30, waiting=3, ttft_p99_s=2.4), Reason.ttft_over_slo, 36),
        # The ITL is over too: steps are being shared somewhere in the window.
        (reading(32, running=20, ttft_p99_s=2.4, itl_p99_s=0.06), Reason.itl_over_slo, 36),
    ],
)
def test_a_ttft_breach_scales_only_when_replicas_can_shorten_it(observation, code, replicas):
    decision = decide(POLICY, History(), Evidence(observation), 0.0)
    assert decision.reason_code is code
    assert decision.desired_replicas == replicas
    if code is Reason.prefill_bound:
        assert decision.mode is Mode.hold
        in_flight = observation.num_requests_running + observation.num_requests_waiting
        per_replica = in_flight / observation.num_pods_scraped
        assert f"P99 TTFT {approx(observation.ttft.p99_s)} s over the 2 s SLO" in decision.reason
        assert f"with {approx(per_replica)} requests in flight per replica" in decision.reason
        assert "more replicas cannot shorten one prefill" in decision.reason


def hold_calm(observation: Observation, *, seconds: float) -> list[Reason]:
    """The same readings every interval, applying each decision: the reason codes seen."""
    decisions = replay_steady(POLICY, observation, until_s=seconds, interval_s=INTERVAL_S)
    return [d.reason_code for d in decisions]


def replicas_after(observation: Observation, seconds: float) -> int:
    decisions = replay_steady(POLICY, observation, until_s=seconds, interval_s=INTERVAL_S)
    return decisions[-1].desired_replicas


@pytest.mark.parametrize(
    ("observation", "replicas"),
    [
        # L40S, Llama-3.1-8B: even a one-sequence decode step (23.8 ms) fills vLLM's 25-50 ms
        # bucket, so the P99 ITL reads 49.7 ms at any load. Scaled by 3/2 it was "75 ms" and no
        # replica ever went; with two requests on three engines, each keeps its own engine on
        # two, then on one fewer the second would share: the proportional test applies again.
        (reading(3, running=2, itl_p99_s=0.0497), 2),
        (reading(3, running=0, itl_p99_s=0.0497), 1),
        (reading(3, running=3, itl_p99_s=0.0497), 3),
        # The prompt-bound L4 fleet gives back the engines its requests do not use.
        (reading(32, running=20, ttft_p99_s=2.4), 20),
        # More in flight than engines left: the usual tests, and 49.7 ms scaled by 32/31 is
        # over 50 ms.
        (reading(32, running=30, waiting=2, itl_p99_s=0.0497), 32),
    ],
)
def test_a_step_down_that_keeps_every_request_on_its_own_engine_skips_the_projection(
    observation, replicas
):
    # Long enough for the window and every 30 s step down after it.
    assert replicas_after(observation, 60.0 + 40 * 30.0) == replicas


def test_the_prefill_bound_hold_keeps_the_scale_down_window_running():
    codes = hold_calm(reading(32, running=20, ttft_p99_s=2.4), seconds=60.0)
    assert set(codes[:12]) == {Reason.prefill_bound}
    assert codes[-1] is Reason.sustained_headroom


prefill_cases = st.builds(
    lambda replicas, running, waiting, ttft, itl: reading(
        replicas, running=running, waiting=waiting, ttft_p99_s=ttft, itl_p99_s=itl
    ),
    st.integers(1, 64),
    st.one_of(st.integers(0, 64).map(float), st.floats(0, 200)),
    st.one_of(st.just(0.0), st.floats(0, 20)),
    st.floats(0.05, 6.0),
    st.floats(0.005, 0.1),
)


@settings(max_examples=400, deadline=None)
@given(prefill_cases, st.one_of(st.none(), st.floats(0, 10)))
def test_prefill_bound_only_when_no_request_shares_an_engine(observation, last_queue):
    decision = decide(
        POLICY, History(last_queue_per_replica=last_queue), Evidence(observation), 0.0
    )
    if decision.reason_code is not Reason.prefill_bound:
        return
    event("prefill bound")
    assert decision.desired_replicas == observation.spec_replicas
    in_flight = observation.num_requests_running + observation.num_requests_waiting
    assert in_flight <= observation.num_pods_scraped
    assert observation.ttft.p99_s > TTFT_SLO_S and observation.itl.p99_s <= ITL_SLO_S
    assert not math.isnan(observation.ttft.p99_s)


def test_with_a_capacity_model_a_step_down_during_a_prefill_bound_breach_says_what_it_is():
    # The model's forecast needs one replica; four are running, each request on its own
    # engine, and the P99 TTFT is over its SLO from prompt length, which no fleet size changes.
    # The model's step down goes ahead as a step down (`ModelHeadroom`, naming the breach); it
    # was once labelled a `PrefillBound` hold while it moved the replicas.
    policy = replace(POLICY, replica_model=TTFT_REPLICA_MODEL)
    light = [LoadPoint(5.0 * i, 5.0, 500.0, 50.0, 1.0) for i in range(1, 80)]
    outlook = forecast(light, horizon_s=95.0, attainment=0.99)
    assert outlook is not None and outlook.span_s >= policy.scale_down_stabilization_s
    for ttft_p99_s in (2.4, 0.3):
        observation = reading(4, running=2, ttft_p99_s=ttft_p99_s, at_s=400.0)
        decision = decide(policy, History(), sized(policy, observation, outlook, 400.0), 400.0)
        assert decision.mode is Mode.scale_down
        assert decision.reason_code is Reason.model_headroom
        assert decision.desired_replicas < 4
        bound_named = "more replicas cannot shorten one prefill" in decision.reason
        assert bound_named == (ttft_p99_s > 2.0)
