"""A breach the histogram proves: with a capacity model, the feedback acts on bucket edges.

vLLM's TTFT buckets around a 2 s SLO are 1.0 and 2.5 s. A P99 interpolated at 2.4 s inside that
bucket may be 1.1 s or 2.5 s: the edges cannot tell on which side of the SLO the exact P99 lies.
Where the step model sizes the fleet, such a reading is not a breach (the model decides, and the
status says the reading is not provably over); from the next bucket up it is. Without a model
the feedback is the only scale-up signal, so it acts on the interpolated reading as before.
"""

from __future__ import annotations

import math
from dataclasses import replace

from _evidence import sized
from autoscale_fleet import TTFT_POLICY, TTFT_REPLICA_MODEL, itl_quantile
from hypothesis import given
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
from tokenpilot.core.autoscale.demand import Forecast, LoadPoint, forecast
from tokenpilot.core.histogram import bucket_edges, quantile
from tokenpilot.core.vllm_metrics import TTFT_BUCKETS_S

POLICY = TTFT_POLICY
MODEL = TTFT_REPLICA_MODEL


def ttft_read_by_prometheus(p99_s: float) -> LatencyQuantile:
    """What the Prometheus source makes of `histogram_quantile`'s answer."""
    lower_s, upper_s = bucket_edges(TTFT_BUCKETS_S, p99_s)
    return LatencyQuantile(p99_s, 200.0, upper_s, lower_s)


def shared_engines(ttft_p99_s: float) -> Observation:
    # Twelve requests on four engines: engines are shared, so a TTFT breach is load, not
    # one prompt's own prefill, and more replicas would help.
    return Observation(
        observed_at_s=400.0,
        spec_replicas=4,
        ready_replicas=4,
        num_pods_expected=4,
        num_pods_scraped=4,
        num_requests_waiting=0.0,
        num_requests_running=12.0,
        itl=itl_quantile(0.012),
        ttft=ttft_read_by_prometheus(ttft_p99_s),
        window_s=30.0,
    )


def steady_outlook() -> Forecast:
    points = [LoadPoint(5.0 * i, 5.0, 20_000.0, 2_000.0, 10.0) for i in range(1, 80)]
    outlook = forecast(points, horizon_s=95.0, attainment=0.99)
    assert outlook is not None
    return outlook


def test_with_a_model_a_p99_inside_the_bucket_that_holds_the_slo_is_no_breach() -> None:
    policy = replace(POLICY, replica_model=MODEL)
    decision = decide(
        policy, History(), sized(policy, shared_engines(2.4), steady_outlook(), 400.0), 400.0
    )
    assert decision.mode not in (Mode.scale_up, Mode.panic)
    assert decision.reason_code not in (Reason.ttft_over_slo, Reason.prefill_bound)
    assert "P99 TTFT 2.4 s (SLO 2 s; its bucket 1-2.5 s holds the SLO: not provably over)" in (
        decision.reason
    )


def test_with_a_model_a_p99_past_the_bucket_edge_over_the_slo_scales_up() -> None:
    policy = replace(POLICY, replica_model=MODEL)
    decision = decide(
        policy, History(), sized(policy, shared_engines(2.6), steady_outlook(), 400.0), 400.0
    )
    assert decision.mode in (Mode.scale_up, Mode.panic)
    assert decision.reason_code is Reason.ttft_over_slo
    assert decision.desired_replicas > 4
    assert "not provably over" not in decision.reason


def test_without_a_model_the_interpolated_p99_still_scales_up() -> None:
    decision = decide(POLICY, History(), Evidence(shared_engines(2.4)), 400.0)
    assert decision.mode in (Mode.scale_up, Mode.panic)
    assert decision.reason_code is Reason.ttft_over_slo
    assert "not provably over" not in decision.reason


def test_an_slo_on_a_bucket_edge_is_always_resolved() -> None:
    # 2.5 s is an edge: a P99 inside (1, 2.5] is within it, one inside (2.5, 5] is over it.
    for p99_s in (1.2, 2.4, 2.5, 2.6, 4.9):
        assert not ttft_read_by_prometheus(p99_s).straddles(2.5)
    assert ttft_read_by_prometheus(2.4).straddles(2.0)
    assert not ttft_read_by_prometheus(2.6).straddles(2.0)


@given(
    st.lists(st.integers(0, 50), min_size=len(TTFT_BUCKETS_S), max_size=len(TTFT_BUCKETS_S)),
    st.integers(1, 50),
)
def test_the_prometheus_source_finds_the_edges_the_buckets_hold(
    counts: list[int], in_inf: int
) -> None:
    # histogram_quantile's value alone gives the bucket the local windowing reads.
    running, cumulative = 0, []
    for bound, count in zip(TTFT_BUCKETS_S, counts, strict=True):
        running += count
        cumulative.append((bound, float(running)))
    buckets = (*cumulative, (math.inf, float(running + in_inf)))
    estimate = quantile(0.99, buckets)
    if estimate.value in TTFT_BUCKETS_S:
        return  # at an edge the value names the bucket below; both agree on the exact P99 side
    assert bucket_edges(TTFT_BUCKETS_S, estimate.value)[1] == estimate.upper_bound or (
        math.isinf(estimate.upper_bound)
    )
    assert bucket_edges(TTFT_BUCKETS_S, estimate.value)[0] == estimate.lower_bound
