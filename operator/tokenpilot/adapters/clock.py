"""The clock: the one place the operator reads the time.

Handlers take a `Clock` and pass what it says to the core as plain values: monotonic seconds
for windows and intervals (`now_s`), RFC 3339 text for status and Events (`now`). A test or a
simulator hands the handlers a clock of its own instead.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def monotonic_s(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...

    def now_rfc3339(self) -> str:
        """The wall-clock time as Kubernetes writes it, e.g. 2026-01-01T00:00:00Z."""
        ...


class SystemClock:
    """The machine's clocks."""

    def monotonic_s(self) -> float:
        return time.monotonic()

    def now_rfc3339(self) -> str:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


SYSTEM_CLOCK: Clock = SystemClock()
