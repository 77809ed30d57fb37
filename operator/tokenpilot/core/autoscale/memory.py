"""What of a service's autoscaler outlives the process: the forecast's load, the records and
the engines' measured pace.

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

The records keep every jump over its forecast as it came; the jumps at or under it count only
as weight under the quantile (`demand.record_jump` reads at least 1.0), so those of each
minute are kept as one: the record jump read from a restored memory is the one the process
had, and an under-forecast minute is forgotten up to a minute later than its last interval
would have been.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from tokenpilot.core.autoscale.correction import PaceReading
from tokenpilot.core.autoscale.demand import MAX_MEMORY_S, Jump, LoadPoint
from tokenpilot.core.autoscale.loop import Now, ServiceState, memory_of, with_outlook

SCHEMA = "serving.tokenpilot.dev/autoscaler-memory/v1"
# The longest a standby takes over from a leader that died (docs/reliability.md, the takeover
# bound). A memory written at most this (and two evaluations) before its restore was written
# at the old process's shutdown, or just before it died: it resumes whole.
TAKEOVER_S = 34.0
# The unwatched time a restored memory does not count against its points: a write interval of
# the operator's (60 s, handlers/autoscaler.py) and a takeover, rounded up.
UNWATCHED_FORGIVEN_S = 120.0
# The jumps at or under the forecast are kept as one per this many seconds.
UNDER_FORECAST_BUCKET_S = 60.0
_LOAD_FIELDS = ("age_s", "interval_s", "prompt_tokens", "output_tokens", "requests", "waiting")
_JUMP_FIELDS = ("age_s", "ratio", "requests")
_PACE_FIELDS = ("age_s", "over_alone", "chunk_term")


class InvalidMemory(ValueError):
    """A snapshot that cannot be read; the message names the field."""


def snapshot(state: ServiceState, now: Now) -> dict[str, Any] | None:
    """The state's load and records as JSON-able data, or None when it has counted no load."""
    if not state.load and not state.jumps:
        return None
    load = [
        [
            _age(now.monotonic_s, p.at_s),
            _figure(p.interval_s),
            _figure(p.prompt_tokens),
            _figure(p.output_tokens),
            _figure(p.requests),
            _figure(p.waiting),
        ]
        for p in state.load
    ]
    jumps = [
        [_age(now.monotonic_s, j.at_s), _figure(j.ratio), _figure(j.requests)]
        for j in _compact(state.jumps)
    ]
    pace = [
        [_age(now.monotonic_s, r.at_s), _figure(r.over_alone), _figure(r.chunk_term)]
        for r in state.pace_readings
    ]
    return {
        "schema": SCHEMA,
        "writtenAt": now.wall,
        "load": load,
        "jumps": jumps,
        "paceReadings": pace,
    }


def restore(state: ServiceState, memory: Mapping[str, Any], now: Now) -> ServiceState:
    """`state` with the load and records of `memory` (a `snapshot`); InvalidMemory naming the
    field when it cannot be read.

    The memory resumes where it was written: the time the service went unwatched, up to
    `UNWATCHED_FORGIVEN_S`, is not counted against its points (its bursts are held that much
    longer, the safe side); beyond that they age by the wall-clock gap. Until the process has
    watched a scale-down window of its own the forecast asks for more but claims no smaller
    fleet: the fleet in place was sized on load the memory may lack. A memory written longer
    than a takeover before (the old process died between writes) has a hole: it keeps its
    records, but measures new jumps only once the process has watched a whole memory."""
    if memory.get("schema") != SCHEMA:
        raise InvalidMemory(f"schema: expected {SCHEMA!r}, found {memory.get('schema')!r}")
    written = _wall_s(memory.get("writtenAt"), "writtenAt")
    gap_s = max(0.0, _wall_s(now.wall, "the clock") - written)
    aged_s = max(0.0, gap_s - UNWATCHED_FORGIVEN_S)
    load = [
        LoadPoint(now.monotonic_s - aged_s - age_s, *rest)
        for age_s, *rest in _rows(memory, "load", _LOAD_FIELDS)
        if aged_s + age_s < MAX_MEMORY_S
    ]
    jumps = [
        Jump(now.monotonic_s - aged_s - age_s, ratio, requests)
        for age_s, ratio, requests in _rows(memory, "jumps", _JUMP_FIELDS)
        if aged_s + age_s < MAX_MEMORY_S
    ]
    # The ratios live as long as the forecast's load, not the records' hour.
    pace = [
        PaceReading(now.monotonic_s - aged_s - age_s, over_alone, chunk_term)
        for age_s, over_alone, chunk_term in _rows(memory, "paceReadings", _PACE_FIELDS)
        if aged_s + age_s < memory_of(state)
    ]
    for at, p in enumerate(load):
        if p.interval_s <= 0:
            raise InvalidMemory(f"load[{at}].interval_s: must be over 0, found {p.interval_s}")
    load.sort(key=lambda p: p.at_s)
    jumps.sort(key=lambda j: j.at_s)
    pace.sort()
    whole = gap_s <= TAKEOVER_S + 2 * state.interval_s
    restored = replace(
        state,
        load=tuple(load),
        jumps=tuple(jumps),
        pace_readings=tuple(pace),
        restored_at_s=now.monotonic_s,
        jumps_resume_at_s=None if whole else now.monotonic_s + memory_of(state),
    )
    return with_outlook(restored)


def _compact(jumps: Sequence[Jump]) -> list[Jump]:
    """The jumps over the forecast as they are; those at or under it one per minute (the
    latest time, the largest ratio, the requests summed)."""
    kept = [j for j in jumps if j.ratio > 1.0]
    buckets: dict[int, Jump] = {}
    for j in jumps:
        if j.ratio > 1.0:
            continue
        key = math.floor(j.at_s / UNDER_FORECAST_BUCKET_S)
        seen = buckets.get(key)
        buckets[key] = (
            j
            if seen is None
            else Jump(max(seen.at_s, j.at_s), max(seen.ratio, j.ratio), seen.requests + j.requests)
        )
    return sorted([*kept, *buckets.values()], key=lambda j: j.at_s)


def _rows(memory: Mapping[str, Any], key: str, fields: Sequence[str]) -> list[list[float]]:
    rows = memory.get(key, [])
    if not isinstance(rows, list):
        raise InvalidMemory(f"{key}: expected a list of rows, found {type(rows).__name__}")
    out: list[list[float]] = []
    for at, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(fields):
            raise InvalidMemory(f"{key}[{at}]: expected [{', '.join(fields)}], found {row!r}")
        for name, value in zip(fields, row, strict=True):
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


def _age(now_s: float, at_s: float) -> float:
    return round(max(0.0, now_s - at_s), 3)


def _figure(value: float) -> float:
    """Six significant digits: the counters' increments are read no finer."""
    return float(f"{value:.6g}")
