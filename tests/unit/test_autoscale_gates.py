"""The queue-spike and scale-down gates of decide(), over recorded series in virtual time."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from autoscale_fleet import ITL_SLO_S, itl_quantile, replay_steady

from tokenpilot.core.autoscale import (
    AutoscalePolicy,
    Evidence,
    History,
    LatencyQuantile,
    Mode,
    Observation,
    Reason,
    decide,
)

POLICY = AutoscalePolicy(min_replicas=1, max_replicas=8, itl_p99_slo_s=ITL_SLO_S)
INTERVAL_S = 5.0


def reading(
    at_s: float,
    *,
    replicas: int,
    waiting: float,
    running: float = 8.0,
    itl: LatencyQuantile | None = None,
) -> Observation:
    return Observation(
        observed_at_s=at_s,
        spec_replicas=replicas,
        ready_replicas=replicas,
        num_pods_expected=replicas,
        num_pods_scraped=replicas,
        num_requests_waiting=waiting,
        num_requests_running=running,
        itl=itl_quantile(0.012) if itl is None else itl,
        ttft=None,
        window_s=30.0,
    )


def replay_queue(policy: AutoscalePolicy, waiting_series: list[float], replicas: int = 1):
    """Feed one waiting-queue reading per interval to decide(), applying each decision."""
    history = History()
    out = []
    for index, waiting in enumerate(waiting_series):
        at_s = index * INTERVAL_S
        decision = decide(
            policy, history, Evidence(reading(at_s, replicas=replicas, waiting=waiting)), at_s
        )
        history = decision.history
        replicas = decision.desired_replicas
        out.append(decision)
    return out


@pytest.mark.parametrize(
    ("series", "replicas_after", "first_move_at"),
    [
        # One scrape catches a burst a single engine clears within a second: no scale-out.
        ([0, 13, 0, 0, 0], [1, 1, 1, 1, 1], None),
        ([0, 13, 1, 13, 0, 12, 0], [1] * 7, None),
        # The same queue still there at the next evaluation is real: act on the second reading,
        # within two intervals of the crossing.
        ([0, 13, 13, 13], [1, 1, 4, 4], 2),
        ([0, 6, 6, 6], [1, 1, 2, 2], 2),
        # Whatever its size, one reading is a spike; two are a backlog, acted on in panic.
        ([0, 129, 0, 0], [1, 1, 1, 1], None),
        ([0, 40, 40], [1, 1, 5], 2),
    ],
)
def test_queue_counts_only_when_it_outlasts_an_interval(series, replicas_after, first_move_at):
    decisions = replay_queue(POLICY, series)
    assert [d.desired_replicas for d in decisions] == replicas_after
    moves = [i for i, d in enumerate(decisions) if d.mode in (Mode.scale_up, Mode.panic)]
    assert (moves[0] if moves else None) == first_move_at
    for index, value in enumerate(series):
        if index and moves and index < moves[0] and value > POLICY.target_queue_per_replica:
            assert decisions[index].reason_code is Reason.queue_spike


def test_a_blind_evaluation_breaks_the_pair_of_queue_readings():
    history = decide(POLICY, History(), Evidence(reading(0.0, replicas=1, waiting=13)), 0.0).history
    blind = replace(reading(5.0, replicas=1, waiting=13), num_requests_running=None)
    history = decide(POLICY, history, Evidence(blind), 5.0).history
    after = decide(POLICY, history, Evidence(reading(10.0, replicas=1, waiting=13)), 10.0)
    assert after.desired_replicas == 1 and after.reason_code is Reason.queue_spike


def hold_calm(policy: AutoscalePolicy, observation: Observation) -> list[int]:
    """The same observation every interval for the scale-down window and a bit: replicas."""
    until_s = policy.scale_down_stabilization_s + 4 * INTERVAL_S
    decisions = replay_steady(policy, observation, until_s=until_s, interval_s=INTERVAL_S)
    return [d.desired_replicas for d in decisions]


@pytest.mark.parametrize(
    ("replicas", "itl_p99_s", "waiting", "goes_down"),
    [
        # A true P99 of 28 ms sits in vLLM's 25-50 ms bucket: provably under a 50 ms SLO.
        # On 4 replicas one fewer carries 4/3 of the load: at most about 37 ms, under 50 ms.
        (4, 0.028, 0.0, True),
        (2, 0.012, 0.0, True),
        # On 2 replicas the survivor carries twice the load: up to 56 ms, over the SLO.
        (2, 0.028, 0.0, False),
        # 45 ms is under the SLO, but one replica fewer would not be.
        (8, 0.045, 0.0, False),
        # 55 ms lands in the 50-75 ms bucket: not provably under the SLO, never a step down.
        (8, 0.055, 0.0, False),
        # A queue that would be over half its target after the step keeps the replica.
        (4, 0.012, 7.0, False),
        (4, 0.012, 5.0, True),
    ],
)
def test_scale_down_when_the_smaller_fleet_stays_within_targets(
    replicas, itl_p99_s, waiting, goes_down
):
    policy = replace(POLICY, scale_down_stabilization_s=60.0)
    observation = reading(0.0, replicas=replicas, waiting=waiting, itl=itl_quantile(itl_p99_s))
    seen = hold_calm(policy, observation)
    assert (min(seen) < replicas) is goes_down, seen
    assert all(later <= earlier for earlier, later in itertools.pairwise(seen))


def test_scale_down_waits_for_the_window_and_says_why_not():
    policy = replace(POLICY, scale_down_stabilization_s=60.0)
    kept = decide(
        policy,
        History(),
        Evidence(reading(0.0, replicas=2, waiting=0, itl=itl_quantile(0.028))),
        0.0,
    )
    assert kept.mode is Mode.steady
    assert "on 1 replicas" in kept.reason and "P99 ITL would be about 0.056 s" in kept.reason
