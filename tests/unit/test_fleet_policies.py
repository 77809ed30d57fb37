"""The baseline autoscalers' arithmetic against their documented defaults."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.core.autoscale.window import EngineSample
from tokenpilot_lab.fleet import FleetView
from tokenpilot_lab.fleet.policies import HpaPolicy, KedaPolicy, KpaPolicy
from tokenpilot_lab.fleet.policies.hpa_algorithm import (
    HpaBehavior,
    external_average_recommendation,
    pods_metric_recommendation,
)


def view(
    now_s: float, running: list[int], *, spec: int | None = None, waiting: int = 0
) -> FleetView:
    pods = {
        f"p{i}": EngineSample(now_s, float(waiting if i == 0 else 0), float(r), 0.1, (), ())
        for i, r in enumerate(running)
    }
    spec_replicas = len(running) if spec is None else spec
    return FleetView(now_s, now_s, spec_replicas, len(running), spec_replicas - len(running), pods)


@pytest.mark.parametrize(
    ("current", "samples", "missing", "target", "expected"),
    [
        (2, [10.0, 10.0], 0, 10.0, 2),  # at target
        (2, [10.5, 10.5], 0, 10.0, 2),  # within the 0.1 tolerance
        (2, [20.0, 20.0], 0, 10.0, 4),  # double the target: double the pods
        (4, [2.0, 2.0, 2.0, 2.0], 0, 10.0, 1),  # ceil(0.2 * 4)
        (3, [30.0, 30.0], 1, 10.0, 6),  # a starting pod counts as 0 on the way up
        (3, [11.5, 11.5], 1, 10.0, 3),  # padding the starting pod undoes the scale-up
        (3, [2.0, 2.0], 1, 10.0, 2),  # on the way down a starting pod counts as at target
    ],
)
def test_hpa_pods_metric_recommendation(
    current: int, samples: list[float], missing: int, target: float, expected: int
) -> None:
    assert pods_metric_recommendation(current, samples, missing, target)[0] == expected


def test_hpa_external_average_is_total_over_threshold() -> None:
    assert external_average_recommendation(2, 52.0, 5.0)[0] == 11
    assert external_average_recommendation(2, 10.4, 5.0)[0] == 2  # within tolerance


def test_hpa_behavior_limits_scale_up_to_max_of_double_and_four_pods() -> None:
    behavior = HpaBehavior(1, 100)
    assert behavior.apply(0.0, 1, 50) == 5  # +4 pods beats +100 % from one
    assert HpaBehavior(1, 100).apply(0.0, 10, 50) == 20  # +100 % beats +4


def test_hpa_behavior_scales_down_to_the_highest_recommendation_of_300_s() -> None:
    behavior = HpaBehavior(1, 100)
    assert behavior.apply(0.0, 8, 8) == 8
    assert behavior.apply(100.0, 8, 2) == 8  # 8 was recommended within 300 s
    assert behavior.apply(250.0, 8, 3) == 8
    assert behavior.apply(301.0, 8, 2) == 3  # the 8 aged out; 3 (t=250) is the highest left
    assert behavior.apply(551.0, 3, 2) == 2


def test_hpa_policy_reads_running_per_pod() -> None:
    policy = HpaPolicy(target_running_per_replica=8.0, min_replicas=1, max_replicas=10)
    assert policy.decide(view(15.0, [16, 16])).replicas == 4
    assert policy.interval_s == 15.0


def test_keda_scales_on_requests_in_flight_through_its_hpa_every_15_s() -> None:
    policy = KedaPolicy(threshold=5.0, min_replicas=1, max_replicas=20)
    # 2 running + 40 waiting = 42 in flight: ceil(42 / 5) = 9, but an HPA without a behavior
    # grows to at most max(2 x 2, 4) = 4 per sync.
    assert policy.decide(view(15.0, [1, 1], waiting=40)).replicas == 4
    assert policy.interval_s == 15.0
    assert policy.decide(view(30.0, [1] * 4, spec=4, waiting=40)).replicas == 8
    assert policy.decide(view(45.0, [1] * 8, waiting=0)).replicas == 8  # 300 s stabilization


def test_hpa_without_a_behavior_doubles_or_adds_up_to_four() -> None:
    legacy = HpaBehavior(1, 100, legacy=True)
    assert legacy.apply(0.0, 1, 50) == 4  # max(2 x 1, 4)
    assert HpaBehavior(1, 100, legacy=True).apply(0.0, 10, 50) == 20


def test_aibrix_cooldown_takes_the_lowest_recommendation_of_300_s_on_the_way_down() -> None:
    # As coded in AIBrix's stabilizeRecommendation: below the current count, the smallest
    # recommendation of the cooldown window wins, even one lower than today's.
    policy = KpaPolicy(target_running_per_replica=10.0, min_replicas=1, max_replicas=50)
    assert policy._cool_down(0.0, 4, 1) == 1
    assert policy._cool_down(100.0, 4, 3) == 1  # 1 (t=0) is within 300 s
    assert policy._cool_down(200.0, 4, 6) == 6  # up: this recommendation alone
    assert policy._cool_down(301.0, 4, 3) == 3  # the 1 aged out


def test_kpa_panics_on_a_sustained_burst_and_at_most_doubles() -> None:
    policy = KpaPolicy(target_running_per_replica=10.0, min_replicas=1, max_replicas=50)
    for t in range(0, 170, 2):
        assert policy.decide(view(float(t), [10, 10])).replicas == 2
    # 8x load: one sample does not panic, a few in the 60 s panic window do.
    choices = [policy.decide(view(float(t), [80, 80])) for t in range(170, 190, 2)]
    assert not choices[0].reason.startswith("panic")
    panicked = [c for c in choices if c.reason.startswith("panic")]
    assert panicked and panicked[0].replicas == 4  # capped at 2x the two ready pods


def test_kpa_does_not_scale_down_while_panicking() -> None:
    policy = KpaPolicy(target_running_per_replica=10.0, min_replicas=1, max_replicas=50)
    assert policy.decide(view(0.0, [40, 40])).replicas == 4  # panic: 8 wanted, 2x cap
    during = [policy.decide(view(float(t), [1, 1, 1, 1])) for t in range(2, 180, 2)]
    assert min(c.replicas for c in during) >= 4
    # A whole stable window after the last panic condition, the stable average rules again.
    after = [policy.decide(view(float(t), [1, 1, 1, 1])) for t in range(182, 400, 2)]
    assert after[-1].replicas < 4 and not after[-1].reason.startswith("panic")


def test_hpa_behavior_holds_the_starting_count_for_one_window() -> None:
    # A run starts mid-day: the controller has recommended the current count all along.
    behavior = HpaBehavior(1, 100)
    assert behavior.apply(15.0, 6, 1) == 6
    assert behavior.apply(310.0, 6, 1) == 6  # 15 s + 300 s not yet passed
    assert behavior.apply(316.0, 6, 1) == 1


@settings(max_examples=200, deadline=None)
@given(
    current=st.integers(1, 40),
    recommendations=st.lists(st.integers(0, 200), min_size=1, max_size=30),
)
def test_hpa_behavior_stays_in_bounds_and_limits_each_step_up(
    current: int, recommendations: list[int]
) -> None:
    behavior = HpaBehavior(2, 60)
    replicas = current
    for i, recommended in enumerate(recommendations):
        desired = behavior.apply(15.0 * i, replicas, recommended)
        assert 2 <= desired <= 60
        assert desired <= max(replicas + 4, 2 * replicas, 2)
        replicas = desired


@settings(max_examples=200, deadline=None)
@given(loads=st.lists(st.integers(0, 400), min_size=1, max_size=60), ready=st.integers(1, 20))
def test_kpa_never_leaves_its_rate_bounds(loads: list[int], ready: int) -> None:
    policy = KpaPolicy(target_running_per_replica=10.0, min_replicas=1, max_replicas=100)
    for i, load in enumerate(loads):
        per_pod = [load // ready] * ready
        choice = policy.decide(view(2.0 * i, per_pod))
        assert 1 <= choice.replicas <= 100
        assert choice.replicas <= max(1, 2 * ready)  # max scale-up rate 2x of ready pods
