"""Measured figures in the status's words, to the precision they are known.

The autoscaler rewrites its status whenever the words change. A P99 interpolated inside a
histogram bucket, or a forecast read as a quantile of a few hundred seconds of counters, is
not known to three or six figures; printed that way it changed the words, and so cost an API
write, at about four evaluations in five of a steady service (docs/autoscaling.md, *Status
writes*). Two significant figures say what a reader can act on, and a figure that moves by
more than its own precision still changes the words at once.
"""

from __future__ import annotations

import math


def approx(value: float, digits: int = 2) -> str:
    """`value` to `digits` significant figures, thousands grouped: 438578 -> "440,000",
    0.482 -> "0.48", 0.0103 -> "0.010". Zero and non-finite values as Python prints them."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    places = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, places)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > digits - 1 - places:
        # Rounding carried into a new power of ten (9.96 -> 10): one place fewer.
        places -= 1
        rounded = round(value, places)
    return f"{rounded:,.{max(0, places)}f}"
