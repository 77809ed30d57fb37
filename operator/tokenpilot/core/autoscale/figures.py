"""Measured figures in the status's words, to the precision they are known.

The autoscaler rewrites its status whenever the words change. A P99 interpolated inside a
histogram bucket, or a forecast read as a quantile of a few hundred seconds of counters, is
not known to three or six figures; printed that way it would change the words, and so cost an
API write, at nearly every evaluation (docs/autoscaling.md, *Status writes*). Two significant
figures say what a reader can act on, and a figure that moves by more than its own precision
still changes the words at once.
"""

from __future__ import annotations

import math


def approx(value: float, digits: int = 2) -> str:
    """`value` to `digits` significant figures, thousands grouped: 438578 -> "440,000",
    0.482 -> "0.48", 0.0103 -> "0.010". Zero and non-finite values as Python prints them."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    # Round by the format's own rule, then print without an exponent, the decimals taken from
    # the rounded value (9.96 -> 10, not 10.0).
    rounded = float(f"{value:.{digits}g}")
    places = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:,.{places}f}"


def seconds_ago(now_s: float, at_s: float) -> float:
    """How long before `now_s` a reading was taken, to the millisecond (never negative)."""
    return round(max(0.0, now_s - at_s), 3)


def snapshot_figure(value: float) -> float:
    """Six significant digits: the counters' increments are read no finer."""
    return float(f"{value:.6g}")
