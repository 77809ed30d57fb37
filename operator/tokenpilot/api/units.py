"""The units the LLMService API accepts, one rule per field, used by every surface.

A rule checks one value and words its refusal once; the API types (pydantic), the CRD (CEL
the API server runs), `tokenpilot plan` and the lab's `simulate --slo` all ask the same rule,
so the same values pass everywhere and a refusal reads the same, each surface putting its own
name for the field in front.

Durations are written as Go and CEL's `duration()` write them, which is also how `kubectl
--timeout` takes them: one or more <number><unit> parts with no spaces, units ns, us (or µs),
ms, s, m and h: `50ms`, `2s`, `1.5s`, `1m30s`. A bare number is refused because 50 could mean
milliseconds or seconds. Each duration field has a range that keeps a unit mistake from
passing: an inter-token latency over 10 s or a TTFT over 10 min is a wrong unit, not a target.

Fractions (GPU memory, attainment) are numbers between 0 and 1; a percentage such as 90 is
refused with the fraction to write instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_UNITS = "ns|us|µs|ms|s|m|h"
_PART = re.compile(rf"([0-9]+(?:\.[0-9]+)?)({_UNITS})")
# The whole grammar, for CEL's `matches` (RE2) and for Python alike.
DURATION_REGEX = rf"^([0-9]+(\.[0-9]+)?({_UNITS}))+$"
UNITS_WORDS = "ns, us, ms, s, m, h"
MAX_DURATION_CHARS = 32


def duration_s(text: str) -> float | None:
    """Seconds in `text` if it follows the grammar, else None (no range applied)."""
    if not isinstance(text, str) or not re.fullmatch(DURATION_REGEX, text):
        return None
    return math.fsum(float(n) * _UNIT_S[u] for n, u in _PART.findall(text))


def shown(value: object) -> str:
    """A value as a refusal shows it, the same way CEL's string() does: 90.0 -> 90."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class DurationRule:
    """A duration field: what it is, its range (both ends included) and an example."""

    what: str  # e.g. "a plausible P99 inter-token latency"
    least: str  # e.g. "1ms"
    most: str  # e.g. "10s"
    example: str  # e.g. "50ms"

    @property
    def least_s(self) -> float:
        return duration_s(self.least) or 0.0

    @property
    def most_s(self) -> float:
        return duration_s(self.most) or 0.0

    def message(self, value: object) -> str:
        """The refusal, one sentence with the fix, for `value` (the surface adds the name)."""
        return (
            f"{shown(value)} is not {self.what}; write a duration from {self.least} to "
            f"{self.most} with its unit, e.g. {self.example}"
        )

    def parse_s(self, value: object) -> float:
        """Seconds in `value`, or ValueError with `message`."""
        text = value if isinstance(value, str) and len(value) <= MAX_DURATION_CHARS else None
        seconds = None if text is None else duration_s(text)
        if seconds is None or not self.least_s <= seconds <= self.most_s:
            raise ValueError(self.message(value))
        return seconds

    def cel(self) -> tuple[str, str, str]:
        """(rule, message, messageExpression) for the CRD: the same test and the same words."""
        rule = (
            f"type(self) == string && self.matches(r'{DURATION_REGEX}') && "
            f"duration(self) >= duration('{self.least}') && "
            f"duration(self) <= duration('{self.most}')"
        )
        tail = self.message("").removeprefix(" ")
        return rule, f"the value {tail}", f"string(self) + ' {_cel_quote(tail)}'"


@dataclass(frozen=True)
class FractionRule:
    """A fraction field: above `above` and at most (or below) `top`."""

    what: str  # e.g. "a fraction of GPU memory"
    above: float
    top: float
    top_included: bool
    example: str  # e.g. "0.9 for 90%"

    def message(self, value: object) -> str:
        at_most = "at most" if self.top_included else "below"
        return (
            f"{shown(value)} is not {self.what}; write a number above {shown(self.above)} and "
            f"{at_most} {shown(self.top)}, e.g. {self.example}"
        )

    def check(self, value: object) -> float:
        """`value` as a float, or ValueError with `message`."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(self.message(value))
        number = float(value)
        fits = number <= self.top if self.top_included else number < self.top
        if not (number > self.above and fits):  # also refuses NaN
            raise ValueError(self.message(value))
        return number

    def cel(self) -> tuple[str, str, str | None]:
        compare = "<=" if self.top_included else "<"
        rule = f"double(self) > {float(self.above)!r} && double(self) {compare} {float(self.top)!r}"
        # No messageExpression: CEL's cost estimate refuses any string() of a number (its
        # length is unbounded), so the API server's "Invalid value" line carries these words
        # without the value.
        return rule, f"the value {self.message('').removeprefix(' ')}", None


def _cel_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


ITL_P99 = DurationRule("a plausible P99 inter-token latency", "1ms", "10s", "50ms")
TTFT_P99 = DurationRule("a plausible P99 time to first token", "1ms", "10m", "2s")
AUTOSCALING_INTERVAL = DurationRule("an evaluation interval", "1s", "10m", "5s")
STABILIZATION_WINDOW = DurationRule("a stabilization window", "0s", "1h", "300s")
RETUNE_COOLDOWN = DurationRule("a re-tune cooldown", "1m", "168h", "1h")
SPILL_OVER_AFTER = DurationRule("a spill-over wait", "0s", "1h", "2m")
SPILL_OVER_RETRY = DurationRule("a spill-over retry wait", "1s", "24h", "10m")
GPU_MEMORY_UTILIZATION = FractionRule("a fraction of GPU memory", 0.0, 0.98, True, "0.9 for 90%")
ATTAINMENT = FractionRule("a fraction of requests", 0.5, 1.0, False, "0.99 for 99%")
