"""Durations as people write them ("50ms", "2s", "1.5s", "1m30s") turned into seconds, and back.

The grammar and each field's range are the API's (`tokenpilot.api.units`), so the CLI, the
lab and the CRD accept the same spellings and refuse with the same words; here they become
`InvalidSpec` naming the field as the caller knows it (`slo.itlP99`, `--itl-p99`).
"""

from __future__ import annotations

from datetime import datetime

from tokenpilot.api.units import UNITS_WORDS, DurationRule, FractionRule, duration_s
from tokenpilot.core.errors import InvalidSpec


def parse_duration_s(text: str, field: str = "duration") -> float:
    """Seconds in `text`, e.g. "50ms" -> 0.05, with no range; `InvalidSpec` naming `field`."""
    seconds = duration_s(text)
    if seconds is None:
        raise InvalidSpec(
            f"{field}: {text!r} is not a duration; write a number with its unit and no space, "
            f"e.g. 50ms, 2s, 1.5s or 1m30s (units: {UNITS_WORDS})"
        )
    return seconds


def parse_within(rule: DurationRule, text: str, field: str) -> float:
    """Seconds in `text` when it is a duration within `rule`'s range, else `InvalidSpec`
    with the rule's words after `field`."""
    try:
        return rule.parse_s(text)
    except ValueError as exc:
        raise InvalidSpec(f"{field}: {exc}") from None


def check_fraction(rule: FractionRule, value: float, field: str) -> float:
    """`value` when `rule` admits it, else `InvalidSpec` with the rule's words after `field`."""
    try:
        return rule.check(value)
    except ValueError as exc:
        raise InvalidSpec(f"{field}: {exc}") from None


def format_duration_s(seconds: float) -> str:
    """A short human spelling that never rounds a positive time to zero: 0.05 -> "50 ms",
    0.0035 -> "3.5 ms", 5e-5 -> "50 us", 2.0 -> "2.00 s"."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 0.01:
        return f"{seconds * 1e3:.0f} ms"
    if seconds >= 0.001:
        return f"{seconds * 1e3:.1f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.3g} us"
    return f"{seconds * 1e9:.3g} ns"


def seconds_between(earlier: str, later: str) -> float | None:
    """Seconds from one RFC 3339 time to another; None where either does not parse."""
    try:
        start = datetime.fromisoformat(earlier.replace("Z", "+00:00"))
        end = datetime.fromisoformat(later.replace("Z", "+00:00"))
    except ValueError:
        return None
    if start.tzinfo is None or end.tzinfo is None:
        return None
    return (end - start).total_seconds()
