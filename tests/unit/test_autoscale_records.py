"""Records: a burst taller than anything the forecast's memory holds.

The forecast sizes for the busiest intervals of its memory, so a burst beyond all of them
arrives on a fleet sized for less. Each interval is measured against the forecast in force
when it came, and the fleet keeps up with the forecast times the jumps this service's records
have shown (read at the attainment target, weighted by requests, over the last hour). A load
that never outgrows its forecast asks nothing more.
"""

from __future__ import annotations

from dataclasses import replace

from autoscale_fleet import LINEAR_POLICY, LINEAR_REPLICA_MODEL, light_load
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.autoscale import Observation
from tokenpilot.core.autoscale.capacity import Demand
from tokenpilot.core.autoscale.demand import (
    MAX_MEMORY_S,
    Jump,
    LoadPoint,
    forecast,
    jump,
    record_jump,
    remember_jump,
)
from tokenpilot.core.autoscale.loop import ServiceState, step
from tokenpilot.core.autoscale.observation import Current, Load, Now

MODEL = LINEAR_REPLICA_MODEL
POLICY = LINEAR_POLICY
INTERVAL_S = 5.0
LEVEL = Load(INTERVAL_S, 100_000.0, 0.0, 10_000.0, 100.0)  # 20,000 prompt tokens/s


def reading(at_s: float, load: Load, replicas: int) -> Observation:
    return replace(light_load(at_s, ready=replicas), load=load)


def run(loads: list[Load]) -> list[tuple[int, str]]:
    """The loop over one load per interval, its decisions applied at once."""
    state, replicas, out = ServiceState(POLICY, interval_s=INTERVAL_S), 1, []
    for index, load in enumerate(loads):
        at_s = INTERVAL_S * (index + 1)
        current = Current(spec_replicas=replicas, ready_replicas=replicas)
        state, decision, _ = step(
            state, reading(at_s, load, replicas), current, Now(at_s, f"t{index}")
        )
        replicas = decision.desired_replicas
        out.append((replicas, decision.reason))
    return out


def scaled(load: Load, factor: float) -> Load:
    return replace(
        load,
        num_prompt_tokens=load.num_prompt_tokens * factor,
        num_output_tokens=load.num_output_tokens * factor,
        num_requests=load.num_requests * factor,
    )


def test_after_a_record_burst_the_fleet_keeps_up_with_one_as_tall_and_forgets_it_in_an_hour() -> (
    None
):
    warm = 120  # 600 s: past the 500 s memory
    after = int(MAX_MEMORY_S / INTERVAL_S) + 10
    decisions = run([LEVEL] * warm + [scaled(LEVEL, 2.0)] + [LEVEL] * after)
    level_replicas, level_words = decisions[warm - 1]
    assert "keep up with a burst" not in level_words
    replicas, words = decisions[warm + 20]
    assert "to keep up with a burst 2.0x that (the records of the last 60 min)" in words
    assert replicas > level_replicas
    # The burst's own interval has left the memory: only the record's height holds the fleet.
    replicas, words = decisions[warm + 110]
    assert "keep up with a burst 2.0x" in words
    assert replicas > level_replicas
    # An hour on, the record is forgotten and the fleet is the level load's again.
    assert decisions[-1][0] == level_replicas
    assert "keep up with a burst" not in decisions[-1][1]


def test_a_level_load_never_outgrows_its_forecast() -> None:
    decisions = run([LEVEL] * 200)
    assert all("keep up with a burst" not in words for _, words in decisions)


def point(at_s: float, prompt_per_s: float) -> LoadPoint:
    return LoadPoint(at_s, INTERVAL_S, prompt_per_s * INTERVAL_S, 1_000.0, 10.0)


def test_a_jump_is_measured_only_against_a_forecast_that_has_seen_a_whole_memory() -> None:
    young = forecast(
        [point(5.0 * i, 1_000.0) for i in range(1, 20)],
        horizon_s=35.0, attainment=0.99,
    )  # fmt: skip
    full = forecast(
        [point(5.0 * i, 1_000.0) for i in range(1, 101)],
        horizon_s=35.0, attainment=0.99,
    )  # fmt: skip
    assert young is not None and full is not None
    assert jump(young, point(505.0, 3_000.0), lookback_s=500.0, waiting_before=0.0) is None
    measured = jump(full, point(505.0, 3_000.0), lookback_s=500.0, waiting_before=0.0)
    assert measured is not None
    assert measured.ratio == 3.0


def test_jumps_older_than_the_records_memory_are_forgotten() -> None:
    jumps = (Jump(0.0, 2.0, 10.0), Jump(100.0, 1.5, 10.0))
    kept = remember_jump(jumps, Jump(MAX_MEMORY_S + 50.0, 0.9, 10.0), MAX_MEMORY_S + 50.0)
    assert [j.at_s for j in kept] == [100.0, MAX_MEMORY_S + 50.0]


@given(
    st.lists(st.tuples(st.floats(0.0, 10.0), st.floats(0.0, 1_000.0)), min_size=1, max_size=50),
    st.floats(0.5, 0.999),
)
def test_the_record_jump_is_at_least_one_and_never_beyond_the_largest_jump(
    pairs: list[tuple[float, float]], attainment: float
) -> None:
    jumps = [Jump(float(i), ratio, weight) for i, (ratio, weight) in enumerate(pairs)]
    height = record_jump(jumps, attainment)
    assert 1.0 <= height <= max(1.0, *(j.ratio for j in jumps))


@given(st.floats(1.0, 50_000.0), st.floats(0.0, 5_000.0))
def test_keeping_up_never_needs_more_replicas_than_meeting_the_slos(
    prompt_per_s: float, output_per_s: float
) -> None:
    demand = Demand(prompt_per_s, output_per_s, 1_000.0, 100.0, 4_000.0)
    slo, _ = MODEL.replicas_needed(demand, 512)
    keep_up, _ = MODEL.replicas_needed(demand, 512, keep_up_only=True)
    assert keep_up <= slo


def cached_point(at_s: float, requested_per_s: float, computed_share: float) -> LoadPoint:
    requested = requested_per_s * INTERVAL_S
    return LoadPoint(
        at_s,
        INTERVAL_S,
        requested * computed_share,
        1_000.0,
        10.0,
        cached_prompt_tokens=requested * (1.0 - computed_share),
    )


def test_a_replica_joining_with_a_cold_prefix_cache_sets_no_record() -> None:
    # A shared 2,048-token prefix: the fleet finds 99 % of prompt tokens cached. A replica that
    # joins prefills its first prompts in full, so the prefilled tokens jump 50-fold for an
    # interval while the requests and their tokens stay as they were.
    memory = [cached_point(5.0 * i, 100_000.0, 0.01) for i in range(1, 101)]
    full = forecast(memory, horizon_s=35.0, attainment=0.99)
    assert full is not None
    cold = cached_point(505.0, 100_000.0, 0.5)
    measured = jump(full, cold, lookback_s=500.0, waiting_before=0.0)
    assert measured is not None
    assert measured.ratio < 1.0 + 1e-9
    # Three times the requested tokens at the usual hit rate is a record, as without a cache.
    burst = jump(full, cached_point(505.0, 300_000.0, 0.01), lookback_s=500.0, waiting_before=0.0)
    assert burst is not None
    assert abs(burst.ratio - 3.0) < 1e-9


def test_an_interval_that_drains_a_backlog_measures_no_jump() -> None:
    full = forecast(
        [point(5.0 * i, 1_000.0) for i in range(1, 101)],
        horizon_s=35.0, attainment=0.99,
    )  # fmt: skip
    assert full is not None
    # New replicas clear a queue of 40: they prefill four times the forecast's rate, all of it
    # load that arrived before (and was measured then, as the queue grew).
    drained = replace(point(505.0, 4_000.0), waiting=0.0)
    assert jump(full, drained, lookback_s=500.0, waiting_before=40.0) is None
    steady = replace(point(505.0, 4_000.0), waiting=40.0)
    measured = jump(full, steady, lookback_s=500.0, waiting_before=40.0)
    assert measured is not None and measured.ratio == 4.0
