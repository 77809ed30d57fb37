"""Counting observations into vLLM's histogram buckets, as the engines' /metrics would.

The edges are vLLM's own (`core.vllm_metrics`): TTFT and inter-token latency. Counts are kept
per bucket (not cumulative) so a bulk add is one bisect; `cumulative()` turns them into the
`(le, count)` pairs that `core.histogram` reads.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from tokenpilot.core import vllm_metrics
from tokenpilot.core.histogram import Bucket

TTFT_BUCKETS_S = vllm_metrics.TTFT_BUCKETS_S
ITL_BUCKETS_S = vllm_metrics.TOKEN_LATENCY_BUCKETS_S


class BucketCounter:
    """Observation counts per bucket (the last slot is +Inf), growing only."""

    __slots__ = ("bounds", "counts", "sum_s")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        # The histogram's `_sum`: the seconds of every observation.
        self.sum_s = 0.0

    def observe(self, value_s: float, num: int = 1) -> None:
        # Prometheus buckets are inclusive upper bounds: `le`.
        self.counts[bisect.bisect_left(self.bounds, value_s)] += num
        self.sum_s += value_s * num

    def observe_steps(self, durations_s: list[float], num_decode: list[int]) -> None:
        """Every decode token of a step is one ITL observation of the step's duration."""
        bounds, counts = self.bounds, self.counts
        total_s = 0.0
        for duration_s, num in zip(durations_s, num_decode, strict=True):
            if num:
                counts[bisect.bisect_left(bounds, duration_s)] += num
                total_s += duration_s * num
        self.sum_s += total_s

    def cumulative(self) -> tuple[Bucket, ...]:
        return cumulative(self.bounds, self.counts)


def cumulative(bounds: Sequence[float], counts: Sequence[int]) -> tuple[Bucket, ...]:
    """Per-bucket counts as cumulative `(le, count)` pairs ending with +Inf."""
    out: list[Bucket] = []
    running = 0
    for bound, count in zip((*bounds, math.inf), counts, strict=True):
        running += count
        out.append((bound, float(running)))
    return tuple(out)
