"""What a metrics source saw of one service at one time, what the cluster says of it, the
clock, and the history decide() threads on.

All are small frozen values. A metrics source fills the metric fields; the caller adds the
replica counts from the cluster (or the simulator's fleet). A field set to None means "could not
be read" and makes decide() hold; zero traffic is not missing: a latency histogram with no
observations in the window reads as `LatencyQuantile(num_observations=0)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tokenpilot.api.llmservice import Condition


@dataclass(frozen=True, slots=True)
class Current:
    """What the cluster says at this evaluation. `pod_startups_s`: each Ready engine pod's
    seconds from created to Ready, by pod name, where the pod says."""

    spec_replicas: int
    ready_replicas: int
    generation: int = 0
    conditions: Sequence[Condition] = ()
    pod_startups_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Now:
    """The clock, read once: monotonic seconds for windows, RFC 3339 text for status."""

    monotonic_s: float
    wall: str


@dataclass(frozen=True, slots=True)
class LatencyQuantile:
    """A P99 over the window, from histogram bucket deltas summed over the scraped pods.

    `upper_bound_s` and `lower_bound_s` are the edges of the bucket that holds the P99: the
    exact P99 is never above the one nor at or below the other. When a caller has no bucket
    edges (a simulator with exact samples) it may leave them None and the estimate is used as
    its own bound.
    """

    p99_s: float
    num_observations: float
    upper_bound_s: float | None = None
    lower_bound_s: float | None = None

    @property
    def idle(self) -> bool:
        """No tokens (or requests) in the window: nothing to measure, nothing wrong."""
        return self.num_observations <= 0

    @property
    def valid(self) -> bool:
        """Idle, or a finite non-negative estimate."""
        return self.idle or (math.isfinite(self.p99_s) and self.p99_s >= 0)

    @property
    def bound_s(self) -> float:
        """The value to test "well under target" against: the bucket edge when known."""
        if self.upper_bound_s is None or math.isnan(self.upper_bound_s):
            return self.p99_s
        return max(self.p99_s, self.upper_bound_s)

    def straddles(self, slo_s: float) -> bool:
        """Whether the P99's bucket holds `slo_s` strictly inside it: its edges cannot tell on
        which side of the SLO the exact P99 lies (vLLM's TTFT buckets 1.0 and 2.5 s around a
        2 s SLO), so an interpolated reading over the SLO proves no breach."""
        lower, upper = self.lower_bound_s, self.upper_bound_s
        if lower is None or upper is None or math.isnan(lower) or math.isnan(upper):
            return False
        return lower < slo_s < upper


@dataclass(frozen=True, slots=True)
class Lengths:
    """A length histogram's increase: cumulative buckets (tokens, requests) and the sum."""

    buckets: tuple[tuple[float, float], ...]
    total_tokens: float

    @property
    def num_requests(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0

    def plus(self, other: Lengths | None) -> Lengths:
        if other is None:
            return self
        merged: dict[float, float] = dict(self.buckets)
        for bound, count in other.buckets:
            merged[bound] = merged.get(bound, 0.0) + count
        return Lengths(tuple(sorted(merged.items())), self.total_tokens + other.total_tokens)


@dataclass(frozen=True, slots=True)
class Served:
    """What the engines served over an interval beyond the counters' totals: the finished
    requests' prompt and output lengths, the prefix cache's lookups and hits in tokens, and the
    prefill-time histogram's seconds and count."""

    prompt_lengths: Lengths | None = None
    output_lengths: Lengths | None = None
    cache_queries: float = 0.0
    cache_hits: float = 0.0
    prefill_sum_s: float = 0.0
    prefill_count: float = 0.0

    def plus(self, other: Served) -> Served:
        def merged(a: Lengths | None, b: Lengths | None) -> Lengths | None:
            return b if a is None else a.plus(b)

        return Served(
            merged(self.prompt_lengths, other.prompt_lengths),
            merged(self.output_lengths, other.output_lengths),
            self.cache_queries + other.cache_queries,
            self.cache_hits + other.cache_hits,
            self.prefill_sum_s + other.prefill_sum_s,
            self.prefill_count + other.prefill_count,
        )


@dataclass(frozen=True, slots=True)
class Load:
    """What the engines took in over `interval_s`: the increases of vLLM's counters
    (`vllm:prompt_tokens`, `vllm:prompt_tokens_cached`, `vllm:generation_tokens`,
    `vllm:request_success`) summed over the `num_pods` pods read at both ends of the interval,
    and of the inter-token latency histogram's count and sum (gaps between tokens, and their
    seconds), whose quotient is the mean step the decodes met."""

    interval_s: float
    num_prompt_tokens: float
    num_cached_prompt_tokens: float
    num_output_tokens: float
    num_requests: float
    num_pods: int = 0
    num_itl_gaps: float = 0.0
    itl_sum_s: float = 0.0
    served: Served = field(default_factory=Served)

    @property
    def is_finite(self) -> bool:
        """Whether every figure is a number: a NaN or infinite counter is no reading."""
        return all(
            math.isfinite(x)
            for x in (
                self.interval_s,
                self.num_prompt_tokens,
                self.num_cached_prompt_tokens,
                self.num_output_tokens,
                self.num_requests,
                self.num_itl_gaps,
                self.itl_sum_s,
            )
        )

    @property
    def computed_prompt_tokens(self) -> float:
        """Prompt tokens the engines had to prefill: those not found in the prefix cache."""
        return max(0.0, self.num_prompt_tokens - self.num_cached_prompt_tokens)


@dataclass(frozen=True, slots=True)
class Observation:
    """One service's signals at `observed_at_s` (same clock as decide's `now_s`).

    Replica counts:
    - `spec_replicas`: the scale subresource's spec.replicas when observed.
    - `ready_replicas`: engine pods that are Ready; `spec - ready` are starting.
    - `num_pods_expected`: ready pods the source tried to read; `num_pods_scraped`: those it
      read successfully. Sums below cover the scraped pods only.

    Metric fields are None when the source could not read them; `problems` says why, one short
    sentence per problem (a pod that refused the connection, a server that answered garbage).
    """

    observed_at_s: float
    spec_replicas: int
    ready_replicas: int
    num_pods_expected: int
    num_pods_scraped: int
    num_requests_waiting: float | None
    num_requests_running: float | None
    itl: LatencyQuantile | None
    ttft: LatencyQuantile | None
    kv_cache_usage: float | None = None
    window_s: float = 0.0
    problems: tuple[str, ...] = ()
    # The counters' increase since the previous reading (direct) or over the window
    # (Prometheus); None when no pod has been read twice or the engines export no counters.
    load: Load | None = None
    # Pods were read, but none twice yet: the P99s cannot exist yet, and nothing is wrong.
    awaiting_second_scrape: bool = False


@dataclass(frozen=True, slots=True)
class History:
    """What decide() remembers between evaluations; start from `History()`.

    - `breach_since_s`: start of the current run of evaluations with a signal over target.
    - `calm_since_s`: start of the current run with every signal well under target and the
      whole fleet visible.
    - `last_short_s`: when an evaluation last found the fleet short of what it needed (a step
      up, or a breach that waited for starting replicas or was held at maxReplicas); no step
      down follows inside the scale-down window.
    - `last_scale_down_s`: when decide() last stepped down.
    - `last_queue_per_replica`: the queue read by the previous evaluation, None after a blind
      one; a queue counts only when two consecutive readings are over target.
    - `calm_floors`: for the evaluations of the calm run within the last scale-down window,
      (time, the fewest replicas that evaluation's readings showed would stay within targets).
      A step down goes no lower than the largest of them: the busiest reading of the window,
      not only the latest, must fit the smaller fleet.
    """

    breach_since_s: float | None = None
    calm_since_s: float | None = None
    last_short_s: float | None = None
    last_scale_down_s: float | None = None
    last_queue_per_replica: float | None = None
    calm_floors: tuple[tuple[float, int], ...] = ()
