"""A service's memory across an operator restart: written by one process, resumed by the next.

The forecast's load and the records are what a restart would lose; `snapshot` keeps them as
JSON and `restore` hands them to a fresh state. A restored service keeps its records and its
fleet; a memory with a hole in it (written long before the restart) measures no new record
until the new process has watched a whole lookback; unreadable memories are refused by field.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_autoscale_records import INTERVAL_S, LEVEL, POLICY, reading, scaled

from tokenpilot.core.autoscale.demand import MAX_MEMORY_S, Jump, record_jump
from tokenpilot.core.autoscale.loop import ServiceState, step
from tokenpilot.core.autoscale.memory import InvalidMemory, restore, snapshot
from tokenpilot.core.autoscale.observation import Current, Load, Now
from tokenpilot.core.autoscale.plan import DemandMemory, _compact

EPOCH = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def wall(at_s: float) -> str:
    return (EPOCH + timedelta(seconds=at_s)).isoformat().replace("+00:00", "Z")


def run(
    loads: list[Load], state: ServiceState, replicas: int, start_s: float = 0.0
) -> tuple[ServiceState, int, list[str]]:
    """The loop over one load per interval from `start_s`, decisions applied at once."""
    words = []
    for index, load in enumerate(loads):
        at_s = start_s + INTERVAL_S * (index + 1)
        current = Current(spec_replicas=replicas, ready_replicas=replicas)
        state, decision, _ = step(
            state, reading(at_s, load, replicas), current, Now(at_s, wall(at_s))
        )
        replicas = decision.desired_replicas
        words.append(decision.reason)
    return state, replicas, words


def fresh() -> ServiceState:
    return ServiceState(POLICY, interval_s=INTERVAL_S)


# 600 s of level load, a burst twice the level, then 100 s of level: a record in the memory.
BEFORE = [LEVEL] * 120 + [scaled(LEVEL, 2.0)] + [LEVEL] * 20
BEFORE_END_S = INTERVAL_S * len(BEFORE)


def written() -> tuple[dict, int]:
    state, replicas, words = run(BEFORE, fresh(), 1)
    assert "keep up with a burst 2.0x" in words[-1]
    memory = snapshot(state, Now(BEFORE_END_S, wall(BEFORE_END_S)))
    assert memory is not None
    return json.loads(json.dumps(memory)), replicas  # as the ConfigMap holds it


def test_a_restarted_operator_resumes_the_forecast_and_the_records() -> None:
    memory, replicas = written()
    # The new process: its own monotonic clock (here 7 s), 20 s of wall time later.
    restart = Now(7.0, wall(BEFORE_END_S + 20.0))
    restored = restore(fresh(), memory, restart)
    assert restored.demand.outlook is not None
    assert restored.demand.outlook.record_jump == pytest.approx(2.0, rel=1e-4)
    assert restored.demand.outlook.span_s == pytest.approx(500.0)
    # Its next evaluations read the load again; the records stay in its words.
    _, kept, words = run([LEVEL] * 3, restored, replicas, start_s=7.0)
    assert "keep up with a burst 2.0x" in words[-1]
    assert kept == replicas
    # Without the memory the same process knows no record.
    _, _, cold = run([LEVEL] * 3, fresh(), replicas, start_s=7.0)
    assert "keep up with a burst" not in cold[-1]


def test_a_restored_service_steps_down_only_after_watching_a_scale_down_window() -> None:
    memory, replicas = written()
    restored = restore(fresh(), memory, Now(0.0, wall(BEFORE_END_S + 5.0)))
    # The load halves after the restart: the memory says fewer replicas would do, but the
    # fleet in place was sized on load the memory may lack, so it is kept for a window.
    _, _, words = run([scaled(LEVEL, 0.1)] * 100, restored, replicas * 3)
    window = int(POLICY.scale_down_stabilization_s / INTERVAL_S)
    assert all("scaling" not in w for w in words[: window - 2]), words[: window - 2]
    assert "s of the 300 s scale-down window: keeping" in words[10]
    assert any("scaling" in w for w in words[window:])


def test_a_memory_written_long_before_the_restart_keeps_its_records_but_measures_none() -> None:
    memory, replicas = written()
    late = restore(fresh(), memory, Now(0.0, wall(BEFORE_END_S + 90.0)))  # killed, not stopped
    soon = restore(fresh(), memory, Now(0.0, wall(BEFORE_END_S + 10.0)))
    assert soon.demand.jumps_resume_at_s is None
    assert late.demand.jumps_resume_at_s == pytest.approx(500.0)
    assert late.demand.outlook is not None and late.demand.outlook.record_jump == pytest.approx(
        2.0, rel=1e-4
    )
    # A burst five times the level right after, 2.5x the forecast (which holds the 2x one):
    # measured as a record only by `soon`.
    burst = [scaled(LEVEL, 5.0)] + [LEVEL] * 2
    soon_state, _, _ = run(burst, soon, replicas)
    late_state, _, _ = run(burst, late, replicas)
    assert max(j.ratio for j in soon_state.demand.jumps) == pytest.approx(2.5, rel=0.05)
    assert max(j.ratio for j in late_state.demand.jumps) == pytest.approx(2.0, rel=1e-4)


def test_prefix_cache_hits_survive_a_restart_and_a_memory_written_without_them_reads_none() -> None:
    cached = replace(LEVEL, num_cached_prompt_tokens=LEVEL.num_prompt_tokens * 0.75)
    state, _, _ = run([cached] * 20, fresh(), 1)
    memory = snapshot(state, Now(100.0, wall(100.0)))
    assert memory is not None
    restart = Now(0.0, wall(110.0))
    restored = restore(fresh(), json.loads(json.dumps(memory)), restart)
    assert restored.demand.outlook is not None
    assert restored.demand.outlook.computed_prompt_share == pytest.approx(0.25, rel=1e-4)
    # The same memory as an earlier operator wrote it: six fields a load row, no hits.
    memory["load"] = [row[:6] for row in memory["load"]]
    older = restore(fresh(), memory, restart)
    assert older.demand.outlook is not None
    assert older.demand.outlook.computed_prompt_share == 1.0


def test_a_memory_older_than_an_hour_restores_nothing() -> None:
    memory, _ = written()
    restored = restore(fresh(), memory, Now(0.0, wall(BEFORE_END_S + MAX_MEMORY_S + 200.0)))
    assert (
        restored.demand.load == ()
        and restored.demand.jumps == ()
        and restored.demand.outlook is None
    )


@given(
    st.lists(
        st.tuples(st.floats(0, 3600), st.floats(0.05, 4.0), st.floats(0.5, 500, allow_nan=False)),
        min_size=1,
        max_size=200,
    ),
    st.sampled_from([0.9, 0.99, 0.999]),
)
def test_compacting_the_jumps_under_the_forecast_keeps_the_record_jump(
    rows: list[tuple[float, float, float]], attainment: float
) -> None:
    jumps = [Jump(at_s, ratio, requests) for at_s, ratio, requests in sorted(rows)]
    compact = _compact(jumps)
    assert len([j for j in compact if j.ratio <= 1.0]) <= 61
    assert record_jump(compact, attainment) == pytest.approx(record_jump(jumps, attainment))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schema": "v0"}, "schema: expected"),
        ({"writtenAt": "yesterday"}, "writtenAt: expected an RFC 3339 time"),
        ({"writtenAt": "2026-11-28T12:00:00"}, "writtenAt: expected a time zone"),
        ({"load": "lots"}, "load: expected a list of rows"),
        ({"load": [[1.0, 5.0, 1.0]]}, "load[0]: expected [age_s, interval_s"),
        ({"load": [[1.0, 5.0, -1.0, 0, 0, 0]]}, "load[0].prompt_tokens: expected a number"),
        ({"load": [[1.0, 0.0, 1.0, 0, 0, 0]]}, "load[0].interval_s: must be over 0"),
        ({"jumps": [[1.0, float("nan"), 3.0]]}, "jumps[0].ratio: expected a number"),
        ({"jumps": [[1.0, True, 3.0]]}, "jumps[0].ratio: expected a number"),
    ],
)
def test_an_unreadable_memory_is_refused_naming_the_field(change: dict, field: str) -> None:
    memory, _ = written()
    with pytest.raises(InvalidMemory, match=None) as raised:
        restore(fresh(), {**memory, **change}, Now(0.0, wall(BEFORE_END_S)))
    assert field in str(raised.value)


def test_a_service_that_counted_nothing_has_no_memory() -> None:
    assert snapshot(fresh(), Now(0.0, wall(0.0))) is None
    counted_one = replace(fresh(), demand=DemandMemory(jumps=(Jump(1.0, 0.5, 1.0),)))
    assert snapshot(counted_one, Now(5.0, wall(5.0)))
