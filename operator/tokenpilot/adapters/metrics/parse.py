"""The project's one Prometheus text parser: a /metrics page in, samples by name out.

Everything that reads an engine's /metrics (the direct metrics source, the engine simulator's
tests, the demo's live view) goes through `parse_metrics`, and reads series by their sample
names (`vllm:prompt_tokens_total`, `vllm:inter_token_latency_seconds_bucket`) so counter-suffix
conventions do not matter.

The text exposition format is one sample per line, `name{label="value",...} value
[timestamp]`, with `# TYPE` and `# HELP` comments. The autoscaler parses every engine's page
every interval, so a line is split at its last brace into series and numbers, and a series
(name and labels, read by regular expressions) is parsed once and cached: an engine names the
same series at every scrape, only the values move.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

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
def _line_filter(families: frozenset[str]) -> tuple[tuple[str, ...], re.Pattern[str]]:
    """The prefixes a wanted line starts with, and the pattern its start must then match."""
    names = "|".join(re.escape(f) for f in sorted(families))
    suffixes = "|".join(re.escape(s) for s in _SUFFIXES)
    prefixes = tuple(sorted(families)) + tuple(f"# TYPE {f}" for f in sorted(families))
    return prefixes, re.compile(rf"(?:# TYPE )?(?:{names})(?:{suffixes})?[ {{]")


def _wanted(text: str, families: frozenset[str]) -> list[str]:
    """The lines of `text` that are TYPE lines or value samples of `families`."""
    prefixes, start = _line_filter(families)
    return [line for line in text.split("\n") if line.startswith(prefixes) and start.match(line)]


def parse_metrics(text: str, only: Collection[str] | None = None) -> MetricsPage:
    """Parse Prometheus text exposition; raise MetricsParseError on anything else.

    `only` keeps just those families' TYPE lines and value samples (no HELP, no `_created`),
    selected by their first characters before parsing: a full vLLM page is ~500 lines, while
    the autoscaler needs about a hundred of them. A page with none of them parses to an empty
    MetricsPage.
    """
    if only is not None:
        kept = _wanted(text, frozenset(only))
        if not kept and text.strip() and not _looks_like_exposition(text):
            first = next((line for line in text.splitlines() if line.strip()), "")[:80]
            raise MetricsParseError(f"not Prometheus text; starts with {first!r}")
        lines: list[str] = kept
    else:
        lines = text.split("\n")
    types: dict[str, str] = {}
    samples: dict[str, list[MetricSample]] = {}
    for line in lines:
        if line.startswith("#"):
            comment = line.split(None, 3)
            if len(comment) == 4 and comment[1] == "TYPE":
                types[comment[2]] = comment[3].strip()
            continue
        if not line.strip():
            continue
        sample = _sample(line)
        samples.setdefault(sample.name, []).append(sample)
    return MetricsPage(types, {name: tuple(found) for name, found in samples.items()})


# A series: its name, then its labels in braces, each value a quoted string with \\, \" and \n
# escapes.
_LABEL = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\]|\\.)*"\s*'
_SERIES = re.compile(
    rf"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{{((?:{_LABEL},)*(?:{_LABEL})?)\}})?\s*"
)
_LABEL_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"n": "\n", "\\": "\\", '"': '"'}


def _sample(line: str) -> MetricSample:
    """One sample line (series, value, optional timestamp), or MetricsParseError quoting it."""
    close = line.rfind("}")
    if close >= 0:
        series_text, numbers = line[: close + 1], line[close + 1 :].split()
    else:
        series_text, *numbers = line.split()
    try:
        if len(numbers) not in (1, 2):
            raise ValueError("a sample is a series, a value and an optional timestamp")
        name, labels = _series(series_text)
        return MetricSample(name, labels, float(numbers[0]))
    except ValueError as error:
        quote = line[:80]
        raise MetricsParseError(f"not Prometheus text ({error}); starts with {quote!r}") from None


@functools.lru_cache(maxsize=8192)
def _series(text: str) -> tuple[str, Mapping[str, str]]:
    """A series' name and labels. Cached: an engine's page names the same few hundred series
    every scrape (a histogram's buckets, one per edge), and only their values change; the
    labels are read-only for the same reason."""
    match = _SERIES.fullmatch(text)
    if match is None:
        raise ValueError("not a metric name with labels")
    name, labels = match.groups()
    pairs = _LABEL_PAIR.findall(labels) if labels else []
    return name, MappingProxyType(
        {key: _ESCAPE.sub(_unescape, value) if "\\" in value else value for key, value in pairs}
    )


def _unescape(match: re.Match[str]) -> str:
    escaped = match.group(1)
    if escaped not in _UNESCAPED:
        raise ValueError(f"unknown escape \\{escaped} in a label value")
    return _UNESCAPED[escaped]


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
