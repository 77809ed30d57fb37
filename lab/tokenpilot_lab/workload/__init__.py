"""Workloads: the requests a fleet is asked to serve, as pure data.

Parsing trace rows (given a column mapping), synthetic generators from a seed, and time, rate
and window transforms. No I/O here: `tokenpilot_lab.traces` reads files and feeds rows in.
"""

from tokenpilot_lab.workload.parse import ColumnMapping, TimeUnit, TraceBuilder
from tokenpilot_lab.workload.synthetic import bursts, diurnal, poisson
from tokenpilot_lab.workload.trace import Trace, TraceError, TraceRequest
from tokenpilot_lab.workload.transform import overlay, scale_rate, scale_time, steady, window

__all__ = [
    "ColumnMapping",
    "TimeUnit",
    "Trace",
    "TraceBuilder",
    "TraceError",
    "TraceRequest",
    "bursts",
    "diurnal",
    "overlay",
    "poisson",
    "scale_rate",
    "scale_time",
    "steady",
    "window",
]
