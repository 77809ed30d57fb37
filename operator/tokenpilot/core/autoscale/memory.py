"""What of a service's autoscaler outlives the process: a snapshot of its two memories (the
forecast's load and records, the engines' measured pace; core.autoscale.plan).

A `ServiceState` lives in the operator's memory. A restart, an upgrade's rolling update or a
standby's takeover would start every service's forecast afresh: the busy intervals of the last
500 s and the records of the last hour gone, and the next burst met without the headroom its
records earned (measured in docs/autoscaling.md, *Restarts*). So the operator writes each
service's `snapshot` now and then, and a new process `restore`s it before its first
evaluation.

Only what was measured is kept: each interval's counted load, each jump over the forecast in
force, and each interval's reading of the engines' pace (core.autoscale.correction; a memory
written before the readings were kept as they are, under the key "paceReadings", has none, and
the pace is measured afresh). Everything else
is rebuilt at once (the forecast from the points) or within a window (the P99 rings, 30 s; the
decision's history). Times are kept as ages before the snapshot's wall-clock time, since
monotonic clocks do not cross processes; the gap until the restore is read off the wall clock
(nodes' clocks may differ; a skew under `UNWATCHED_FORGIVEN_S` moves nothing).

The records keep every jump over its forecast as it came; the jumps at or under it are kept as
one a minute (`plan.UNDER_FORECAST_BUCKET_S`): the record jump read from a restored memory is
the one the process had, and an under-forecast minute is forgotten up to a minute later than
its last interval would have been.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from tokenpilot.core.autoscale.loop import ServiceState
from tokenpilot.core.autoscale.observation import Now
from tokenpilot.core.autoscale.pace import PaceMemory
from tokenpilot.core.autoscale.plan import DemandMemory, forecast_span

SCHEMA = "serving.tokenpilot.dev/autoscaler-memory/v1"
# The longest a standby takes over from a leader that died (docs/reliability.md, the takeover
# bound). A memory written at most this (and two evaluations) before its restore was written
# at the old process's shutdown, or just before it died: it resumes whole.
TAKEOVER_S = 34.0
# The unwatched time a restored memory does not count against its points: a write interval of
# the operator's (`SNAPSHOT_EVERY_S`) and a takeover, rounded up.
UNWATCHED_FORGIVEN_S = 120.0
# How often the operator writes each service's memory for a later process (and once more at
# shutdown); the fleet simulator's killed operator leaves the same.
SNAPSHOT_EVERY_S = 60.0
_LOAD_FIELDS = (
    "age_s",
    "interval_s",
    "prompt_tokens",
    "output_tokens",
    "requests",
    "waiting",
    "cached_prompt_tokens",
)
_JUMP_FIELDS = ("age_s", "ratio", "requests")
_PACE_FIELDS = ("age_s", "over_alone", "chunk_term")
_PREFILL_FIELDS = ("age_s", "excess_s", "added_s")


class InvalidMemory(ValueError):
    """A snapshot that cannot be read; the message names the field."""


def snapshot(state: ServiceState, now: Now) -> dict[str, Any] | None:
    """The state's memories as JSON-able data, or None when it has counted no load."""
    demand = state.demand
    if not demand.load and not demand.jumps:
        return None
    return {
        "schema": SCHEMA,
        "writtenAt": now.wall,
        **demand.snapshot(now.monotonic_s),
        "paceReadings": state.pace.snapshot(now.monotonic_s),
        "prefillSteps": state.pace.prefill_snapshot(now.monotonic_s),
    }


def restore(state: ServiceState, memory: Mapping[str, Any], now: Now) -> ServiceState:
    """`state` with the memories of `memory` (a `snapshot`); InvalidMemory naming the field when
    it cannot be read.

    The memory resumes where it was written: the time the service went unwatched, up to
    `UNWATCHED_FORGIVEN_S`, is not counted against its points (its bursts are held that much
    longer, the safe side); beyond that they age by the wall-clock gap. Until the process has
    watched a scale-down window of its own the forecast asks for more but claims no smaller
    fleet: the fleet in place was sized on load the memory may lack. A memory written longer
    than a takeover before (the old process died between writes) has a hole: it keeps its
    records, but measures new jumps only once the process has watched a whole lookback."""
    if memory.get("schema") != SCHEMA:
        raise InvalidMemory(f"schema: expected {SCHEMA!r}, found {memory.get('schema')!r}")
    written = _wall_s(memory.get("writtenAt"), "writtenAt")
    gap_s = max(0.0, _wall_s(now.wall, "the clock") - written)
    aged_s = max(0.0, gap_s - UNWATCHED_FORGIVEN_S)
    # A load row written before the prefix-cache hits were kept has six fields: it reads as none.
    load = _rows(memory, "load", _LOAD_FIELDS, optional=1)
    for at, row in enumerate(load):
        if row[1] <= 0:
            raise InvalidMemory(f"load[{at}].interval_s: must be over 0, found {row[1]}")
    span = forecast_span(
        state.policy, state.interval_s, state.startups.startup_s(state.policy.startup_s)
    )
    demand = DemandMemory.restore(
        load,
        _rows(memory, "jumps", _JUMP_FIELDS),
        now_s=now.monotonic_s,
        aged_s=aged_s,
        whole=gap_s <= TAKEOVER_S + 2 * state.interval_s,
        span=span,
    )
    pace = PaceMemory.restore(
        _rows(memory, "paceReadings", _PACE_FIELDS),
        now_s=now.monotonic_s,
        aged_s=aged_s,
        lookback_s=span.lookback_s,
        prefill_rows=_rows(memory, "prefillSteps", _PREFILL_FIELDS),
    )
    return replace(state, demand=demand, pace=pace)


def _rows(
    memory: Mapping[str, Any], key: str, fields: Sequence[str], *, optional: int = 0
) -> list[list[float]]:
    """The rows under `key`, each of `fields` (the last `optional` of them may be missing)."""
    rows = memory.get(key, [])
    if not isinstance(rows, list):
        raise InvalidMemory(f"{key}: expected a list of rows, found {type(rows).__name__}")
    out: list[list[float]] = []
    for at, row in enumerate(rows):
        if not isinstance(row, list) or not len(fields) - optional <= len(row) <= len(fields):
            raise InvalidMemory(f"{key}[{at}]: expected [{', '.join(fields)}], found {row!r}")
        for name, value in zip(fields, row, strict=False):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise InvalidMemory(
                    f"{key}[{at}].{name}: expected a number at least 0, found {value!r}"
                )
        out.append([float(v) for v in row])
    return out


def _wall_s(text: Any, field: str) -> float:
    if not isinstance(text, str):
        raise InvalidMemory(f"{field}: expected an RFC 3339 time, found {text!r}")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidMemory(f"{field}: expected an RFC 3339 time, found {text!r}") from None
    if moment.tzinfo is None:
        raise InvalidMemory(f"{field}: expected a time zone (Z or +hh:mm) in {text!r}")
    return moment.timestamp()
