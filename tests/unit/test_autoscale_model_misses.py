"""The step model's misses: a breach on a fleet the model sized corrects the model.

Engines slower than their GPU profile says breach the SLOs on the fleet the model sizes. The
breach scales up; without a memory of it the model stepped the fleet back down a window later
and the breach came back, every few minutes. A miss now multiplies the model's count for an
hour (core.autoscale.correction).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from _steps import LinearStep
from autoscale_fleet import light_load
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.autoscale import AutoscalePolicy, Observation, algorithm
from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.autoscale.correction import (
    MISS_MEMORY_S,
    correction,
    remember_miss,
    steady_fleet,
)
from tokenpilot.core.autoscale.loop import Current, Now, ServiceState, step
from tokenpilot.core.autoscale.observation import LatencyQuantile, Load

MODEL = ReplicaModel(
    LinearStep(0.005, 30e-6, 30e-6), 2048, 256, 1_000_000, itl_slo_s=0.05, ttft_slo_s=2.0
)
POLICY = AutoscalePolicy(
    min_replicas=1, max_replicas=64, itl_p99_slo_s=0.05, ttft_p99_slo_s=2.0, replica_model=MODEL
)
INTERVAL_S = 5.0
LEVEL = Load(INTERVAL_S, 100_000.0, 0.0, 10_000.0, 100.0)  # 20,000 prompt tokens/s
# A P99 TTFT of 3 s in vLLM's 2.5-5 s bucket: provably over the 2 s SLO.
BREACH = LatencyQuantile(3.0, 100.0, 5.0, 2.5)


def run(true_need: int | None, num_intervals: int) -> list[tuple[int, str]]:
    """The loop on a level load whose engines breach the TTFT on fewer than `true_need`
    replicas (None: never), its decisions applied at once. The breach shows once the P99's
    30 s window has been on the short fleet."""
    state, replicas, out = ServiceState(POLICY, interval_s=INTERVAL_S), 8, []
    short_for = 0
    for index in range(num_intervals):
        at_s = INTERVAL_S * (index + 1)
        seen: Observation = replace(light_load(at_s, ready=replicas), load=LEVEL)
        short_for = short_for + 1 if true_need is not None and replicas < true_need else 0
        if short_for * INTERVAL_S > 30.0:
            seen = replace(seen, ttft=BREACH)
        current = Current(spec_replicas=replicas, ready_replicas=replicas)
        state, decision, _ = step(state, seen, current, Now(at_s, f"t{index}"))
        replicas = decision.desired_replicas
        out.append((replicas, decision.reason))
    return out


def modelled_replicas() -> int:
    """What the model alone sizes the level load at."""
    return run(None, 130)[-1][0]


def breaches(decisions: list[tuple[int, str]], true_need: int) -> int:
    """Evaluations that ended on a fleet the engines cannot serve, after the first 10 min."""
    return sum(1 for replicas, _ in decisions[120:] if replicas < true_need)


def test_engines_slower_than_the_model_breach_once_and_the_fleet_then_stays() -> None:
    modelled = modelled_replicas()
    true_need = math.ceil(modelled * 1.5)
    decisions = run(true_need, 120 + 360)  # 10 min to settle, then 30 min
    assert breaches(decisions, true_need) == 0
    replicas, words = decisions[-1]
    assert replicas >= true_need
    assert "as the model's misses correct it" in words
    assert "a fleet it sized breached the SLOs within the last 60 min" in words


def test_without_the_correction_the_same_engines_breach_again_and_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the correction removes: the saw-tooth of breach, scale up, model step down."""
    monkeypatch.setattr(algorithm, "correction", lambda misses, now_s: 1.0)
    true_need = math.ceil(modelled_replicas() * 1.5)
    decisions = run(true_need, 120 + 360)
    steps_down_into_a_breach = sum(
        1
        for (before, _), (after, _) in itertools.pairwise(decisions[120:])
        if after < before and after < true_need
    )
    assert steps_down_into_a_breach >= 5


def test_engines_the_model_prices_right_never_correct_it() -> None:
    decisions = run(None, 400)
    assert all("misses correct it" not in words for _, words in decisions)


def test_a_breach_on_a_fleet_smaller_than_the_model_asked_is_no_miss() -> None:
    """A burst over the forecast breaches a fleet the model had not sized for it: the
    forecast's miss, not the model's."""
    state = ServiceState(POLICY, interval_s=INTERVAL_S)
    for index in range(130):
        at_s = INTERVAL_S * (index + 1)
        seen = replace(light_load(at_s, ready=1), load=LEVEL)
        if index >= 120:
            burst = replace(LEVEL, num_prompt_tokens=8 * LEVEL.num_prompt_tokens)
            seen = replace(seen, ttft=BREACH, load=burst)
        # The fleet is held at one replica (the scale never lands), far under the model's count.
        state, decision, _ = step(state, seen, Current(1, 1), Now(at_s, f"t{index}"))
    assert "need 1 replicas" not in decision.reason
    assert state.history.model_misses == ()
    assert "misses correct it" not in decision.reason


def test_a_miss_corrects_the_model_for_an_hour_and_then_lapses() -> None:
    misses = remember_miss((), 1.6, 100.0)
    assert correction(misses, 100.0) == 1.6
    assert correction(misses, 100.0 + MISS_MEMORY_S - 1.0) == 1.6
    assert correction(misses, 100.0 + MISS_MEMORY_S) == 1.0
    later = remember_miss(misses, 1.2, 100.0 + MISS_MEMORY_S + 5.0)
    assert later == ((100.0 + MISS_MEMORY_S + 5.0, 1.2),)


@given(st.lists(st.tuples(st.floats(0, 7200), st.floats(0.1, 10)), max_size=30), st.floats(0, 9000))
def test_the_correction_is_never_below_one_nor_above_the_largest_recent_miss(
    misses: list[tuple[float, float]], now_s: float
) -> None:
    factor = correction(misses, now_s)
    recent = [f for at_s, f in misses if at_s > now_s - MISS_MEMORY_S]
    assert factor >= 1.0
    assert factor == max([1.0, *recent])


def test_a_fleet_is_steady_from_when_its_last_replica_became_ready() -> None:
    assert steady_fleet(None, 4, 1, 10.0) is None
    assert steady_fleet(None, 4, 0, 10.0) == (4, 10.0)
    assert steady_fleet((4, 10.0), 4, 0, 40.0) == (4, 10.0)
    assert steady_fleet((4, 10.0), 6, 0, 45.0) == (6, 45.0)
    assert steady_fleet((6, 45.0), 6, 2, 50.0) is None
