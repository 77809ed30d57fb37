"""Durations as people write them ("50ms", "2s", "1.5s", "1m30s") turned into seconds.

One parser for the CLI and the API's duration fields. A bare number is refused, because "50"
could be milliseconds or seconds; the error names the field and shows both spellings.
"""

from __future__ import annotations

import re

from tokenpilot.core.errors import InvalidSpec

_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration_s(text: str, field: str = "duration") -> float:
    """Seconds in `text`, e.g. "50ms" -> 0.05; `InvalidSpec` naming `field` otherwise."""
    compact = text.strip().replace(" ", "") if isinstance(text, str) else ""
    pos, total = 0, 0.0
    for match in _PART.finditer(compact):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if not compact or pos != len(compact):
        raise InvalidSpec(
            f"{field}: {text!r} is not a duration; write a number with a unit, "
            f"e.g. 50ms, 2s, 1.5s or 1m30s (units: ns, us, ms, s, m, h)"
        )
    return total


def format_duration_s(seconds: float) -> str:
    """A short human spelling: 0.05 -> "50 ms", 2.0 -> "2.00 s"."""
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms" if seconds < 0.01 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s"
