"""Counting observations into vLLM's histogram buckets, as the engines' /metrics would.

The edges are vLLM's (`core.vllm_metrics`): its defaults, or the `--custom-histogram-buckets`
the engines run with (`engine_edges`). Counts are kept per bucket (not cumulative) so a bulk add
is one bisect; `cumulative()` turns them into the `(le, count)` pairs that `core.histogram`
reads.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokenpilot.core import vllm_metrics
from tokenpilot.core.histogram import Bucket


class BucketCounter:
    """Observation counts per bucket (the last slot is +Inf), growing only."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        # The histogram's `_sum`: every observation's value added up.
        self.total = 0.0

    def observe(self, value: float, num: int = 1) -> None:
        # Prometheus buckets are inclusive upper bounds: `le`.
        self.counts[bisect.bisect_left(self.bounds, value)] += num
        self.total += value * num

    def observe_steps(self, durations_s: list[float], num_decode: list[int]) -> None:
        """Every decode token of a step is one ITL observation of the step's duration."""
        bounds, counts = self.bounds, self.counts
        total_s = 0.0
        for duration_s, num in zip(durations_s, num_decode, strict=True):
            if num:
                counts[bisect.bisect_left(bounds, duration_s)] += num
                total_s += duration_s * num
        self.total += total_s

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


@dataclass(frozen=True, slots=True)
class EngineEdges:
    """The bucket edges of the histograms an engine exports that the autoscaler reads."""

    ttft_s: tuple[float, ...]
    itl_s: tuple[float, ...]
    tokens: tuple[float, ...]


def engine_edges(
    max_model_len: int, custom: Mapping[str, Sequence[float]] | None = None
) -> EngineEdges:
    """The edges of engines started with `--max-model-len max_model_len` and, where given,
    `--custom-histogram-buckets custom` (vLLM's defaults otherwise)."""
    family = vllm_metrics.BY_NAME

    def edges(name: str) -> tuple[float, ...]:
        return family[name].bucket_edges(max_model_len, custom)

    return EngineEdges(
        ttft_s=edges(vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS),
        itl_s=edges(vllm_metrics.INTER_TOKEN_LATENCY_SECONDS),
        tokens=edges(vllm_metrics.REQUEST_PROMPT_TOKENS),
    )
