"""The workload a service served, learned from its engines' own histograms.

Every evaluation adds what the engines served since the one before (core.autoscale.window:
`Served`, summed over the pods): the finished requests' prompt- and output-length histograms,
the prefix cache's lookups and hits. `WorkloadMemory` keeps them in bins of `BIN_S` over the
last `WINDOW_S` and reads, over that window:

- prompt and output tokens per request: the mean exactly (the histograms' sums over their
  counts), the P99 as the upper edge of the bucket that holds it, and that bucket's width over
  its edge as the figure's resolution (the engines TokenPilot renders carry token buckets at
  most 10 % apart, core.vllm_metrics.token_edges, so a P99 is known to within 10 %);
- the mean context a decode attends: the mean prompt and half the mean output;
- the arrival rate (requests finished per second) and the prefix cache's hit rate.

Each figure rests on the requests finished in the window; the tuner takes the observed
workload only from `MIN_REQUESTS` on (core.plan_inputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenpilot.api.workload import TokenFigures
from tokenpilot.core.autoscale.observation import Lengths, Served
from tokenpilot.core.histogram import quantile

# The span the figures cover: ten minutes, long enough for a P99 of a few hundred requests at a
# modest rate, short enough that a change of traffic shows within the hour.
WINDOW_S = 600.0
# Served intervals are summed into bins of this span, so a memory holds ten, not 120.
BIN_S = 60.0
# Requests behind the figures before the tuner plans for them: a P99 of fewer is one or two
# requests' lengths.
MIN_REQUESTS = 300
P99 = 0.99


@dataclass(frozen=True, slots=True)
class LearnedWorkload:
    """The workload of the last `window_s`, and how many requests it rests on."""

    window_s: float
    num_requests: float
    prompt: TokenFigures | None
    output: TokenFigures | None
    arrival_rate_per_s: float
    prefix_cache_hit_rate: float | None

    @property
    def mean_context_tokens(self) -> float | None:
        """The context a decode attends on average: its prompt and half its output."""
        if self.prompt is None or self.output is None:
            return None
        return self.prompt.mean + self.output.mean / 2


@dataclass(frozen=True, slots=True)
class WorkloadBin:
    """What the engines served in [start_s, start_s + BIN_S)."""

    start_s: float
    served: Served
    span_s: float


@dataclass(frozen=True, slots=True)
class WorkloadMemory:
    """The bins of the last `WINDOW_S`, oldest first."""

    bins: tuple[WorkloadBin, ...] = ()

    def add(self, served: Served | None, at_s: float, interval_s: float) -> WorkloadMemory:
        """This memory with one interval's serving (None: nothing read), the bins older than
        the window forgotten."""
        bins = [b for b in self.bins if b.start_s + BIN_S > at_s - WINDOW_S]
        if served is not None:
            start_s = math.floor(at_s / BIN_S) * BIN_S
            if bins and bins[-1].start_s == start_s:
                last = bins[-1]
                bins[-1] = WorkloadBin(start_s, last.served.plus(served), last.span_s + interval_s)
            else:
                bins.append(WorkloadBin(start_s, served, interval_s))
        if len(bins) == len(self.bins) and served is None:
            return self
        return WorkloadMemory(tuple(bins))

    def learned(self) -> LearnedWorkload | None:
        """The workload of the window, or None before any request was counted."""
        if not self.bins:
            return None
        total = Served()
        for b in self.bins:
            total = total.plus(b.served)
        prompt = _figures(total.prompt_lengths)
        output = _figures(total.output_lengths)
        lengths = total.prompt_lengths or total.output_lengths
        num_requests = 0.0 if lengths is None else lengths.num_requests
        if num_requests <= 0:
            return None
        span_s = sum(b.span_s for b in self.bins)
        return LearnedWorkload(
            window_s=span_s,
            num_requests=num_requests,
            prompt=prompt,
            output=output,
            arrival_rate_per_s=num_requests / span_s if span_s > 0 else 0.0,
            prefix_cache_hit_rate=(
                total.cache_hits / total.cache_queries if total.cache_queries > 0 else None
            ),
        )


def _figures(lengths: Lengths | None) -> TokenFigures | None:
    if lengths is None or lengths.num_requests <= 0:
        return None
    estimate = quantile(P99, lengths.buckets)
    upper, lower = estimate.upper_bound, estimate.lower_bound
    if not math.isfinite(upper):
        # Past the last edge (an engine without the operator's buckets): the interpolation is
        # all there is, and its resolution unknown.
        return TokenFigures(
            mean=lengths.total_tokens / lengths.num_requests,
            p99=estimate.value,
            p99_resolution=math.inf,
        )
    resolution = (upper - lower) / upper if upper > 0 else 0.0
    return TokenFigures(
        mean=lengths.total_tokens / lengths.num_requests, p99=upper, p99_resolution=resolution
    )
