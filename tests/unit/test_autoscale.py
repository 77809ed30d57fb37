"""decide() over recorded load series, in virtual time: what a user watching the replicas sees."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from autoscale_fleet import ITL_SLO_S, direction_changes, drive, itl_quantile, observe

from tokenpilot.core.autoscale import (
    AutoscalePolicy,
    Evidence,
    History,
    InvalidPolicy,
    Mode,
    Reason,
    decide,
)
from tokenpilot.core.errors import InvalidSpec

POLICY = AutoscalePolicy(min_replicas=1, max_replicas=8, itl_p99_slo_s=ITL_SLO_S)


def step(before: float, after: float, at_s: float):
    return lambda t: before if t < at_s else after


def test_step_burst_scales_up_at_once_and_waits_for_starting_pods():
    ticks = drive(POLICY, step(0.5, 3.0, 60.0), duration_s=200, startup_s=30)
    first_up = next(t for t in ticks if t.decision.desired_replicas > 1)
    assert first_up.t_s == 60.0  # the first evaluation that sees the burst: P99 ITL over SLO
    assert first_up.decision.reason_code is Reason.itl_over_slo
    # the queue counts from its second reading, one interval later: a backlog, in panic
    confirmed = next(t for t in ticks if t.t_s == 65.0)
    assert confirmed.decision.mode is Mode.panic
    assert confirmed.decision.reason_code is Reason.queue_over_target
    # while the new pods load the model, no further scale-up: they are counted as capacity
    loading = [t for t in ticks if 65.0 < t.t_s < 95.0]
    assert {t.decision.reason_code for t in loading} == {Reason.capacity_starting}
    assert all(t.decision.desired_replicas == confirmed.decision.desired_replicas for t in loading)
    final = ticks[-1]
    assert final.ready >= 3 and final.decision.mode is Mode.steady


def test_slow_ramp_only_grows_and_keeps_up():
    ticks = drive(POLICY, lambda t: 0.5 + 3.0 * min(t, 600) / 600, duration_s=700, startup_s=20)
    replicas = [t.decision.desired_replicas for t in ticks]
    assert replicas == sorted(replicas)
    assert all(t.decision.mode is not Mode.panic for t in ticks)
    assert ticks[-1].ready == ticks[-1].decision.desired_replicas > 1
    assert ticks[-1].decision.mode is Mode.steady  # caught up: every signal within target


def test_oscillating_load_shorter_than_the_window_never_scales_down():
    def wave(t: float) -> float:
        return 1.5 + 1.2 * math.sin(2 * math.pi * t / 120)

    ticks = drive(POLICY, wave, duration_s=900, startup_s=20)
    assert not any(t.decision.mode is Mode.scale_down for t in ticks)
    assert len(direction_changes(ticks)) == 0


def test_ten_percent_noise_on_steady_load_changes_nothing():
    ticks = drive(POLICY, lambda t: 1.4, duration_s=1800, replicas=2, noise=0.10, seed=3)
    assert {t.decision.desired_replicas for t in ticks} == {2}
    assert {t.decision.mode for t in ticks} == {Mode.steady}


def test_load_gone_returns_to_min_only_after_the_window():
    policy = replace(POLICY, scale_down_stabilization_s=120, scale_down_step_interval_s=30)
    ticks = drive(policy, step(2.5, 0.0, 100.0), duration_s=600, replicas=3)
    downs = [t for t in ticks if t.decision.mode is Mode.scale_down]
    assert [t.t_s for t in downs] == [220.0, 250.0]  # 100 s + window, then one step interval
    assert ticks[-1].decision.desired_replicas == 1
    assert all(t.decision.reason_code is Reason.sustained_headroom for t in downs)


def test_stale_metrics_hold_and_say_how_old():
    def lagging(t, observation):
        return replace(observation, observed_at_s=t - 40) if t >= 100 else observation

    ticks = drive(POLICY, step(0.2, 3.0, 100.0), duration_s=300, replicas=2, tamper=lagging)
    late = [t for t in ticks if t.t_s >= 100]
    assert {t.decision.mode for t in late} == {Mode.hold}
    assert {t.decision.desired_replicas for t in late} == {2}
    assert "40.0 s old" in late[0].decision.reason


@pytest.mark.parametrize(
    ("field", "value", "missing"),
    [
        ("num_requests_waiting", math.nan, "num_requests_waiting"),
        ("num_requests_waiting", None, "num_requests_waiting"),
        ("num_requests_running", math.inf, "num_requests_running"),
        ("itl", itl_quantile(math.nan), "P99 ITL"),
        ("itl", None, "P99 ITL"),
    ],
)
def test_nan_or_missing_signal_holds_even_after_a_long_calm(field, value, missing):
    def broken(t, observation):
        return replace(observation, **{field: value}) if t >= 400 else observation

    policy = replace(POLICY, scale_down_stabilization_s=300)
    ticks = drive(policy, lambda t: 0.2, duration_s=800, replicas=4, tamper=broken)
    blind = [t for t in ticks if t.t_s >= 400]
    # 300 s of calm had passed at 300 s, so one step down happened before the metrics broke
    assert {t.decision.desired_replicas for t in blind} == {blind[0].decision.desired_replicas}
    assert {t.decision.reason_code for t in blind} == {Reason.missing_metrics}
    assert missing in blind[0].decision.reason


def test_one_pod_of_four_failing_blocks_scale_down_but_not_scale_up():
    def one_down(t, observation):
        if observation.ready_replicas < 4:
            return observation
        return replace(
            observe(t_load(t), 4, observation.spec_replicas, t, num_pods_scraped=3),
            problems=("pod svc-3: connection refused",),
        )

    def t_load(t):
        return 0.2 if t < 600 else 8.0

    ticks = drive(POLICY, t_load, duration_s=700, replicas=4, tamper=one_down)
    calm = [t for t in ticks if t.t_s < 600]
    assert {t.decision.desired_replicas for t in calm} == {4}
    assert {t.decision.reason_code for t in calm} == {Reason.partial_scrape}
    assert "connection refused" in calm[0].decision.reason
    burst = next(t for t in ticks if t.t_s == 600)
    assert burst.decision.desired_replicas > 4
    assert "seen on 3 of 4 pods" in burst.decision.reason


@pytest.mark.parametrize(
    ("desired", "ready", "expected", "mode", "code"),
    [
        (0, 0, 1, Mode.scale_up, Reason.below_min),
        (12, 12, 8, Mode.scale_down, Reason.above_max),
        (8, 8, 8, Mode.hold, Reason.at_max),
        (3, 0, 3, Mode.hold, Reason.no_ready_pods),
    ],
)
def test_bounds_and_edges(desired, ready, expected, mode, code):
    observation = replace(observe(40.0, ready, desired, 0.0), num_pods_expected=ready)
    decision = decide(POLICY, History(), Evidence(observation), 0.0)
    assert (decision.desired_replicas, decision.mode, decision.reason_code) == (
        expected,
        mode,
        code,
    )


def test_scale_up_window_outside_panic():
    policy = replace(POLICY, scale_up_stabilization_s=10)
    ticks = drive(policy, step(0.5, 1.6, 50.0), duration_s=120, replicas=1)
    first_up = next(t for t in ticks if t.decision.desired_replicas > 1)
    assert first_up.t_s == 60.0 and first_up.decision.mode is Mode.scale_up
    assert ticks[10].decision.reason_code is Reason.confirming  # t = 50 s


def test_idle_service_is_calm_not_blind():
    observation = observe(0.0, 2, 2, 0.0)
    assert observation.itl is not None and observation.itl.idle
    decision = decide(POLICY, History(calm_since_s=-400), Evidence(observation), 0.0)
    assert decision.mode is Mode.scale_down


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_replicas": 0}, "minReplicas"),
        ({"min_replicas": 3, "max_replicas": 2}, "maxReplicas"),
        ({"target_queue_per_replica": 0}, "targetQueueDepthPerReplica"),
        ({"itl_p99_slo_s": -1}, "slo.itlP99"),
        ({"scale_down_ratio": 1.0}, "scale_down_ratio"),
        ({"panic_ratio": 1.0}, "panic_ratio"),
    ],
)
def test_invalid_policy_names_the_field(fields, message):
    with pytest.raises(InvalidPolicy, match=message) as error:
        AutoscalePolicy(**fields)
    assert isinstance(error.value, InvalidSpec)
