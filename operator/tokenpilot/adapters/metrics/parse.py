"""The project's one Prometheus text parser: a /metrics page in, samples by name out.

Everything that reads an engine's /metrics (the direct metrics source, the engine simulator's
tests, the demo's live view) goes through `parse_metrics`, which wraps prometheus_client's text
parser, and reads series by their sample names (`vllm:prompt_tokens_total`,
`vllm:inter_token_latency_seconds_bucket`) so counter-suffix conventions do not matter.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tokenpilot.core import vllm_metrics
from tokenpilot.core.autoscale.window import EngineSample
from tokenpilot.core.histogram import Bucket, normalize


class MetricsParseError(ValueError):
    """A page that is not Prometheus text exposition; the message quotes what was wrong."""


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One sample of a page: a series' name, its labels and its value."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class MetricsPage:
    """One parsed page: family name -> type, and sample name -> samples."""

    types: Mapping[str, str] = field(default_factory=dict)
    samples: Mapping[str, tuple[MetricSample, ...]] = field(default_factory=dict)

    def series(self, name: str, **labels: str) -> tuple[MetricSample, ...]:
        """Samples called `name` whose labels include `labels`."""
        return tuple(
            s
            for s in self.samples.get(name, ())
            if all(s.labels.get(k) == v for k, v in labels.items())
        )

    def sum(self, name: str, **labels: str) -> float | None:
        """Sum over matching series (one per engine in the pod); None if there are none."""
        found = self.series(name, **labels)
        return math.fsum(s.value for s in found) if found else None

    def max(self, name: str, **labels: str) -> float | None:
        found = self.series(name, **labels)
        return max(s.value for s in found) if found else None

    def buckets(self, family: str, **labels: str) -> tuple[Bucket, ...] | None:
        """A histogram's cumulative buckets summed over matching series; None if absent."""
        found = self.series(f"{family}_bucket", **labels)
        if not found:
            return None
        return normalize((_le(s), s.value) for s in found)


def _le(sample: MetricSample) -> float:
    bound = sample.labels.get("le")
    if bound is None:
        raise MetricsParseError(f"{sample.name} has no 'le' label")
    try:
        return float(bound)
    except ValueError:
        raise MetricsParseError(f"{sample.name} has le={bound!r}, not a number") from None


# MetricSample-name suffixes of one family that carry values (`_created` timestamps do not).
_SUFFIXES = ("_bucket", "_count", "_sum", "_total")


@functools.lru_cache(maxsize=16)
def _line_filter(families: frozenset[str]) -> re.Pattern[str]:
    names = "|".join(re.escape(f) for f in sorted(families))
    suffixes = "|".join(re.escape(s) for s in _SUFFIXES)
    return re.compile(rf"^(?:# TYPE )?(?:{names})(?:{suffixes})?[ {{].*$", re.MULTILINE)


def parse_metrics(text: str, only: Collection[str] | None = None) -> MetricsPage:
    """Parse Prometheus text exposition; raise MetricsParseError on anything else.

    `only` keeps just those families' TYPE lines and value samples (no HELP, no `_created`),
    selected by one regular-expression pass before parsing: a full vLLM page is ~50 KB and the
    pure-Python parser's cost grows with it, while the autoscaler needs at most five families.
    A page with none of them parses to an empty MetricsPage.
    """
    if only is not None:
        kept = _line_filter(frozenset(only)).findall(text)
        if not kept and text.strip() and not _looks_like_exposition(text):
            first = next((line for line in text.splitlines() if line.strip()), "")[:80]
            raise MetricsParseError(f"not Prometheus text; starts with {first!r}")
        text = "\n".join(kept) + "\n"
    types: dict[str, str] = {}
    samples: dict[str, list[MetricSample]] = {}
    try:
        for family in text_string_to_metric_families(text):
            types[family.name] = family.type
            for sample in family.samples:
                samples.setdefault(sample.name, []).append(
                    MetricSample(sample.name, dict(sample.labels), float(sample.value))
                )
    # prometheus_client raises ValueError (and on some inputs IndexError or KeyError) with a
    # terse message; name the first offending line so a person can find it.
    except (ValueError, IndexError, KeyError) as error:
        first = next((line for line in text.splitlines() if line.strip()), "")[:80]
        raise MetricsParseError(f"not Prometheus text ({error}); starts with {first!r}") from None
    return MetricsPage(types, {name: tuple(found) for name, found in samples.items()})


def _looks_like_exposition(text: str) -> bool:
    """Whether a page none of whose lines we wanted is still valid text (another exporter)."""
    try:
        parse_metrics(text)
    except MetricsParseError:
        return False
    return True


# The families the autoscaler's signals and demand are read from.
SIGNAL_FAMILIES = frozenset(
    {
        vllm_metrics.NUM_REQUESTS_WAITING,
        vllm_metrics.NUM_REQUESTS_RUNNING,
        vllm_metrics.KV_CACHE_USAGE_PERC,
        vllm_metrics.INTER_TOKEN_LATENCY_SECONDS,
        # The counters the demand model reads: what arrived, not just what waits.
        vllm_metrics.PROMPT_TOKENS,
        vllm_metrics.PREFIX_CACHE_HITS,
        vllm_metrics.GENERATION_TOKENS,
        vllm_metrics.REQUEST_SUCCESS,
    }
)
# And what the workload is learned from (core.autoscale.workload): the requests' lengths, the
# prefix cache's lookups, the prefill times.
WORKLOAD_FAMILIES = frozenset(
    {
        vllm_metrics.REQUEST_PROMPT_TOKENS,
        vllm_metrics.REQUEST_GENERATION_TOKENS,
        vllm_metrics.PREFIX_CACHE_QUERIES,
        vllm_metrics.REQUEST_PREFILL_TIME_SECONDS,
    }
)
# Every family the autoscaler reads from each engine; TTFT only when a TTFT SLO needs it.
ENGINE_FAMILIES = SIGNAL_FAMILIES | WORKLOAD_FAMILIES
ENGINE_FAMILIES_WITH_TTFT = ENGINE_FAMILIES | {vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS}


def engine_sample(page: MetricsPage, at_s: float) -> EngineSample:
    """The autoscaler's figures from one vLLM (or engine simulator) page."""
    return EngineSample(
        at_s=at_s,
        num_requests_waiting=page.sum(vllm_metrics.NUM_REQUESTS_WAITING),
        num_requests_running=page.sum(vllm_metrics.NUM_REQUESTS_RUNNING),
        kv_cache_usage=page.max(vllm_metrics.KV_CACHE_USAGE_PERC),
        itl_buckets=page.buckets(vllm_metrics.INTER_TOKEN_LATENCY_SECONDS),
        ttft_buckets=page.buckets(vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS),
        prompt_tokens_total=page.sum(f"{vllm_metrics.PROMPT_TOKENS}_total"),
        cached_prompt_tokens_total=page.sum(f"{vllm_metrics.PREFIX_CACHE_HITS}_total"),
        output_tokens_total=page.sum(f"{vllm_metrics.GENERATION_TOKENS}_total"),
        requests_total=page.sum(f"{vllm_metrics.REQUEST_SUCCESS}_total"),
        itl_sum_s=page.sum(f"{vllm_metrics.INTER_TOKEN_LATENCY_SECONDS}_sum"),
        prompt_len_buckets=page.buckets(vllm_metrics.REQUEST_PROMPT_TOKENS),
        prompt_len_sum=page.sum(f"{vllm_metrics.REQUEST_PROMPT_TOKENS}_sum"),
        output_len_buckets=page.buckets(vllm_metrics.REQUEST_GENERATION_TOKENS),
        output_len_sum=page.sum(f"{vllm_metrics.REQUEST_GENERATION_TOKENS}_sum"),
        prefix_cache_queries_total=page.sum(f"{vllm_metrics.PREFIX_CACHE_QUERIES}_total"),
        prefill_sum_s=page.sum(f"{vllm_metrics.REQUEST_PREFILL_TIME_SECONDS}_sum"),
        prefill_count=page.sum(f"{vllm_metrics.REQUEST_PREFILL_TIME_SECONDS}_count"),
    )
