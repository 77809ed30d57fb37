"""Histogram bucket edges of the vLLM metrics the policies read, and cumulative counting.

Placeholder until `tokenpilot.core.vllm_metrics` lands: the edges are those vLLM V1 declares
for `vllm:time_to_first_token_seconds` and `vllm:inter_token_latency_seconds`
(vllm/v1/metrics/loggers.py). Counting is per bucket (not cumulative) so a bulk add is one
bisect; `cumulative()` turns counts into the `(le, count)` pairs `core.histogram` expects.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from tokenpilot.core.histogram import Bucket

TTFT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


class BucketCounter:
    """Observation counts per bucket (the last slot is +Inf), growing only."""

    __slots__ = ("bounds", "counts")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value_s: float, num: int = 1) -> None:
        # Prometheus buckets are inclusive upper bounds: `le`.
        self.counts[bisect.bisect_left(self.bounds, value_s)] += num

    def snapshot(self) -> tuple[int, ...]:
        return tuple(self.counts)


def cumulative(bounds: Sequence[float], counts: Sequence[int]) -> tuple[Bucket, ...]:
    """Per-bucket counts as cumulative `(le, count)` pairs ending with +Inf."""
    out: list[Bucket] = []
    running = 0
    for bound, count in zip((*bounds, math.inf), counts, strict=True):
        running += count
        out.append((bound, float(running)))
    return tuple(out)
