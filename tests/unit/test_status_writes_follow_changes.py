"""The autoscaler's status is written when a reader would notice, not at every evaluation.

A steady service whose load wobbles by a few percent is evaluated every interval; its status
is applied when the outcome or a condition changes, and otherwise only to refresh its words
every `STATUS_REFRESH_S`. A change of replicas or of a condition is applied at the evaluation
that makes it."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from typing import Any

from autoscale_fleet import TTFT_POLICY, TTFT_REPLICA_MODEL, light_load
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.autoscale.freshness import (
    FIGURE_BAND,
    STATUS_REFRESH_S,
    reader_would_notice,
    should_write,
)
from tokenpilot.core.autoscale.loop import ApplyStatus, ServiceState, step
from tokenpilot.core.autoscale.observation import Current, Load, Now
from tokenpilot.core.autoscale.workload import MIN_REQUESTS

POLICY = replace(TTFT_POLICY, replica_model=TTFT_REPLICA_MODEL)
INTERVAL_S = 5.0


def _noisy_load(rng: random.Random, noise: float) -> Load:
    wobble = 1 + rng.uniform(-noise, noise)
    return Load(INTERVAL_S, 100_000.0 * wobble, 0.0, 10_000.0 * wobble, 100.0 * wobble)


def test_a_steady_service_is_evaluated_every_interval_and_written_only_to_refresh() -> None:
    rng = random.Random(1)
    state, replicas = ServiceState(POLICY, interval_s=INTERVAL_S), 1
    written_at: list[float] = []
    evaluations = 0
    for index in range(400):  # 2,000 s
        at_s = INTERVAL_S * (index + 1)
        observation = replace(light_load(at_s, ready=replicas), load=_noisy_load(rng, 0.03))
        current = Current(spec_replicas=replicas, ready_replicas=replicas)
        state, decision, actions = step(state, observation, current, Now(at_s, f"t{index}"))
        evaluations += 1
        assert decision.desired_replicas == replicas  # steady: the outcome never moves
        if any(isinstance(action, ApplyStatus) for action in actions):
            written_at.append(at_s)
    # The forecast's words change with the noise; after the first apply the words are
    # refreshed at most every STATUS_REFRESH_S, nothing more.
    assert written_at[0] == INTERVAL_S
    gaps = [b - a for a, b in itertools.pairwise(written_at)]
    assert all(gap >= STATUS_REFRESH_S for gap in gaps), written_at
    assert len(written_at) <= 1 + 2_000 / STATUS_REFRESH_S
    assert evaluations == 400


def test_a_change_of_replicas_is_written_at_the_evaluation_that_makes_it() -> None:
    state, replicas = ServiceState(POLICY, interval_s=INTERVAL_S), 1
    rng = random.Random(2)
    for index in range(30):
        at_s = INTERVAL_S * (index + 1)
        observation = replace(light_load(at_s, ready=replicas), load=_noisy_load(rng, 0.01))
        state, _, _ = step(state, observation, Current(replicas, replicas), Now(at_s, f"t{index}"))
    # A queue far over target in two readings (one is a spike): each evaluation whose outcome
    # moves writes it, and the second scales up.
    outcomes = []
    for index in (31, 32):
        at_s = INTERVAL_S * index
        queued = replace(light_load(at_s, ready=replicas), num_requests_waiting=500.0)
        shown = dict(state.applied["autoscaling"]) if state.applied else {}
        state, decision, actions = step(state, queued, Current(replicas, replicas), Now(at_s, "q"))
        applied = [a for a in actions if isinstance(a, ApplyStatus)]
        outcome = (decision.desired_replicas, decision.mode.value, decision.reason_code.value)
        moved = outcome != (shown["desiredReplicas"], shown["mode"], shown["reasonCode"])
        assert moved and len(applied) == 1, decision.reason
        assert applied[0].owned["autoscaling"]["reasonCode"] == decision.reason_code.value
        outcomes.append(outcome)
    assert outcomes[-1][0] > replicas, outcomes


def test_a_condition_that_flips_is_written_at_once() -> None:
    state, replicas = ServiceState(POLICY, interval_s=INTERVAL_S), 1
    for index in range(10):
        at_s = INTERVAL_S * (index + 1)
        state, _, _ = step(
            state, light_load(at_s, ready=replicas), Current(replicas, replicas), Now(at_s, "t")
        )
    # The only pod stops answering: MetricsAvailable goes False in this evaluation's write.
    at_s = INTERVAL_S * 11
    blind = replace(light_load(at_s, ready=replicas), num_pods_scraped=0)
    state, decision, actions = step(state, blind, Current(replicas, replicas), Now(at_s, "b"))
    applied = [a for a in actions if isinstance(a, ApplyStatus)]
    assert len(applied) == 1, decision.reason
    metrics = [c for c in applied[0].owned["conditions"] if c["type"] == "MetricsAvailable"]
    assert metrics[0]["status"] != "True"


def test_a_condition_whose_words_name_another_fault_is_written_at_once() -> None:
    """Still blind, for a new reason: Prometheus answered no series, now it answers NaN. The
    message is what a reader fixes, so it does not wait for the refresh."""
    shown = _status()
    shown["conditions"] = [
        {
            "type": "MetricsAvailable",
            "status": "False",
            "reason": "MissingMetrics",
            "message": "a signal the autoscaler needs is missing: no series for 0 of 2 ready pods",
        }
    ]
    nan = _status()
    nan["conditions"] = [dict(shown["conditions"][0], message="a signal ... is NaN")]
    assert should_write(shown, nan, since_applied_s=1.0)


def _status(replicas: int = 2, reason: str = "steady", mean: float = 1000.0) -> dict[str, Any]:
    return {
        "autoscaling": {
            "desiredReplicas": replicas,
            "mode": "steady",
            "reasonCode": "WithinSLO",
            "reason": reason,
            "lastDecisionTime": "t0",
        },
        "conditions": [{"type": "MetricsAvailable", "status": "True", "reason": "MetricsRead"}],
        "workload": {"promptTokens": {"mean": mean, "p99": 4096}, "observedAt": "t0"},
    }


def test_learned_figures_are_written_past_their_band_and_not_within_it() -> None:
    shown = _status()
    within = _status(mean=1000.0 * (1 + FIGURE_BAND * 0.8), reason="other words")
    within["workload"]["observedAt"] = "t1"
    past = _status(mean=1000.0 * (1 + FIGURE_BAND * 1.2))
    assert not reader_would_notice(shown, within)
    assert reader_would_notice(shown, past)
    gone = _status()
    del gone["workload"]
    assert reader_would_notice(shown, gone)


@given(
    replicas=st.integers(1, 50),
    other=st.integers(1, 50),
    since_s=st.floats(0.0, 10 * STATUS_REFRESH_S),
    words=st.text(max_size=20),
)
def test_what_is_written_and_when(replicas: int, other: int, since_s: float, words: str) -> None:
    shown = _status(replicas)
    # Nothing new is never written; a first status always is.
    assert not should_write(shown, shown, since_applied_s=since_s)
    assert should_write(None, shown, since_applied_s=None)
    # A new outcome is written at once, whatever the time since the last write.
    moved = _status(other)
    assert should_write(shown, moved, since_applied_s=since_s) == (other != replicas)
    # New words alone wait for the refresh.
    reworded = _status(replicas, reason=f"steady {words}!")
    assert should_write(shown, reworded, since_applied_s=since_s) == (since_s >= STATUS_REFRESH_S)


def test_the_counts_behind_the_figures_are_written_when_the_retune_would_use_them() -> None:
    shown = _status()
    shown["workload"]["requests"] = MIN_REQUESTS - 100
    grown = _status()
    grown["workload"]["requests"] = MIN_REQUESTS - 1
    enough = _status()
    enough["workload"]["requests"] = MIN_REQUESTS
    assert not reader_would_notice(shown, grown)  # the sample grew; the figures held
    assert reader_would_notice(grown, enough)  # the re-tune now trusts the workload
