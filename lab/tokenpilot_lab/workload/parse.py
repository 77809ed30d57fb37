"""Trace rows to requests, given which fields hold the arrival time and the token counts.

Rows arrive one at a time (the reader streams them), each with its line number, so every error
names the line. Checks: required fields present, integer token counts >= 0 (prompt >= 1),
arrival times parseable and not going backwards. Rows with zero output tokens cannot be replayed
(vLLM always emits at least one token) and are skipped with a count, never silently.
Requests at the same instant are legitimate in millisecond traces; they are kept and counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from tokenpilot_lab.workload.trace import Trace, TraceError, TraceRequest


class TimeUnit(StrEnum):
    """How the arrival field is written."""

    seconds = "s"
    milliseconds = "ms"
    microseconds = "us"
    datetime = "datetime"  # ISO 8601 wall clock, e.g. 2023-11-16 18:17:03.97996


_UNIT_SECONDS = {TimeUnit.seconds: 1.0, TimeUnit.milliseconds: 1e-3, TimeUnit.microseconds: 1e-6}


@dataclass(frozen=True, slots=True)
class ColumnMapping:
    """Which field of a row is which. Arrival times are made relative to the first row."""

    arrival: str
    prompt_tokens: str
    output_tokens: str
    time_unit: TimeUnit = TimeUnit.seconds
    # Optional: a field with the prompt's prefix hashes (a JSON list, or integers separated by
    # spaces in a CSV cell), each standing for `hash_block_tokens` prompt tokens.
    hash_ids: str | None = None
    hash_block_tokens: int = 0

    @property
    def required(self) -> tuple[str, str, str]:
        return (self.arrival, self.prompt_tokens, self.output_tokens)


AZURE_LLM_MAPPING = ColumnMapping(
    "TIMESTAMP", "ContextTokens", "GeneratedTokens", TimeUnit.datetime
)
# Mooncake's traces hash each 512-token block of a prompt (FAST 2025 release, README).
MOONCAKE_HASH_BLOCK_TOKENS = 512
MOONCAKE_MAPPING = ColumnMapping(
    "timestamp",
    "input_length",
    "output_length",
    TimeUnit.milliseconds,
    hash_ids="hash_ids",
    hash_block_tokens=MOONCAKE_HASH_BLOCK_TOKENS,
)


class TraceBuilder:
    """Accumulates rows of one source into a `Trace`, failing on the first bad row."""

    def __init__(self, source: str, mapping: ColumnMapping) -> None:
        self.source = source
        self.mapping = mapping
        self._requests: list[TraceRequest] = []
        self._origin: float | None = None
        self._last_arrival = -math.inf
        self._last_line = 0
        self._num_zero_output = 0
        self._first_zero_output_line = 0
        self._num_same_instant = 0
        self._first_same_instant_line = 0

    def check_columns(self, columns: Iterable[str], line: int) -> None:
        """Fail if a header (or a JSON object) lacks a mapped field."""
        present = set(columns)
        missing = [name for name in self.mapping.required if name not in present]
        if missing:
            raise TraceError(
                f"missing column(s) {', '.join(missing)}; found {', '.join(sorted(present))}. "
                "Give the right names with --columns arrival=...,prompt=...,output=...",
                source=self.source,
                line=line,
            )

    def add(self, row: Mapping[str, object], line: int) -> None:
        m = self.mapping
        for name in m.required:
            if name not in row or row[name] in ("", None):
                raise TraceError(f"missing value for {name!r}", source=self.source, line=line)
        arrival_abs = self._arrival_s(row[m.arrival], line)
        num_prompt = self._tokens(row[m.prompt_tokens], m.prompt_tokens, line)
        num_output = self._tokens(row[m.output_tokens], m.output_tokens, line)
        if num_prompt < 1:
            raise TraceError(
                f"{m.prompt_tokens} is {num_prompt}; a request needs at least one prompt token",
                source=self.source,
                line=line,
            )
        if arrival_abs < self._last_arrival:
            raise TraceError(
                f"arrival time goes backwards (line {self._last_line} is later); sort the "
                "file by arrival time first",
                source=self.source,
                line=line,
            )
        if arrival_abs == self._last_arrival:
            self._num_same_instant += 1
            self._first_same_instant_line = self._first_same_instant_line or line
        self._last_arrival, self._last_line = arrival_abs, line
        if self._origin is None:
            self._origin = arrival_abs
        if num_output == 0:
            self._num_zero_output += 1
            self._first_zero_output_line = self._first_zero_output_line or line
            return
        hash_ids = self._hash_ids(row.get(m.hash_ids), line) if m.hash_ids else ()
        self._requests.append(
            TraceRequest(arrival_abs - self._origin, num_prompt, num_output, hash_ids)
        )

    def build(self, name: str | None = None) -> Trace:
        if self._origin is None:
            raise TraceError(
                "no requests: the trace is empty (a header alone is not a trace)",
                source=self.source,
                line=self._last_line or 1,
            )
        notes: list[str] = []
        if self._num_zero_output:
            notes.append(
                f"skipped {self._num_zero_output} row(s) with 0 output tokens "
                f"(first at line {self._first_zero_output_line})"
            )
        if self._num_same_instant:
            notes.append(
                f"{self._num_same_instant} request(s) arrive at the same instant as the one "
                f"before (first at line {self._first_same_instant_line}); kept as simultaneous"
            )
        # The trace lasts until its last arrival; a window or generator can give a longer span.
        duration_s = self._last_arrival - self._origin
        hash_block_tokens = self.mapping.hash_block_tokens if self.mapping.hash_ids else 0
        return Trace(
            name or self.source,
            tuple(self._requests),
            duration_s,
            tuple(notes),
            hash_block_tokens,
        )

    def _hash_ids(self, value: object, line: int) -> tuple[int, ...]:
        """A row's prefix hashes; a row without the field has none."""
        if value is None or value == "":
            return ()
        items: object = value
        if isinstance(value, str):
            items = value.replace(",", " ").strip("[] ").split()
        if not isinstance(items, list):
            raise TraceError(
                f"{self.mapping.hash_ids} must be a list of integers, got {value!r}",
                source=self.source,
                line=line,
            )
        try:
            return tuple(int(str(item)) for item in items if not isinstance(item, bool))
        except ValueError:
            raise TraceError(
                f"{self.mapping.hash_ids} must be a list of integers, got {value!r}",
                source=self.source,
                line=line,
            ) from None

    def _arrival_s(self, value: object, line: int) -> float:
        unit = self.mapping.time_unit
        try:
            if unit is TimeUnit.datetime:
                stamp = datetime.fromisoformat(str(value).strip())
                # Naive wall clocks are read as UTC so the result never depends on the host.
                if stamp.tzinfo is None:
                    stamp = stamp.replace(tzinfo=UTC)
                return stamp.timestamp()
            seconds = float(str(value)) * _UNIT_SECONDS[unit]
        except ValueError:
            raise TraceError(
                f"cannot read {self.mapping.arrival}={value!r} as a time in {unit.value}",
                source=self.source,
                line=line,
            ) from None
        if not math.isfinite(seconds):
            raise TraceError(
                f"{self.mapping.arrival}={value!r} is not a finite time",
                source=self.source,
                line=line,
            )
        return seconds

    def _tokens(self, value: object, field_name: str, line: int) -> int:
        if isinstance(value, bool):
            raise TraceError(
                f"{field_name}={value!r} is not a token count", source=self.source, line=line
            )
        try:
            as_float = float(str(value))
        except ValueError:
            as_float = math.nan
        if not math.isfinite(as_float) or as_float != int(as_float):
            raise TraceError(
                f"{field_name}={value!r} is not a whole number of tokens",
                source=self.source,
                line=line,
            )
        if as_float < 0:
            raise TraceError(
                f"{field_name} is negative ({int(as_float)}); token counts must be >= 0",
                source=self.source,
                line=line,
            )
        return int(as_float)
