"""The `prometheus` metrics source: the same signals as PromQL, over Prometheus's HTTP API.

The engine series are selected by the labels the scrape configuration puts on them (the pod's
namespace and its `serving.tokenpilot.dev/llmservice` label, relabelled to `llmservice`, the
same pair the dashboards and rules use). P99s are `histogram_quantile(0.99, sum by (le)
(rate(..._bucket{sel}[w])))`; the number of observations in the window (to tell an idle service
from a missing metric) is `sum(increase(..._count{sel}[w]))`. The upper edge of the bucket
holding the P99 comes from vLLM's bucket table.

The thirteen instant queries of one evaluation go out at once through one httpx client
(`GET /api/v1/query`), under one timeout. A server that cannot be reached or answers nonsense
leaves every field None with the reason in `problems`; decide() then holds.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from tokenpilot.adapters.metrics.base import ServiceTarget
from tokenpilot.core import vllm_metrics
from tokenpilot.core.autoscale import METRICS_WINDOW_S, LatencyQuantile, Observation
from tokenpilot.core.autoscale.observation import Load
from tokenpilot.core.dashboards.slo import SERVICE_LABELS
from tokenpilot.core.histogram import bucket_edges

DEFAULT_TIMEOUT_S = 3.0


def selector(target: ServiceTarget) -> str:
    """The PromQL label matcher for one service's engine series."""
    namespace_label, service_label = SERVICE_LABELS
    return f'{{{namespace_label}="{target.namespace}",{service_label}="{target.name}"}}'


@dataclass(frozen=True, slots=True)
class Queries:
    """Every expression the source evaluates for one service, by field."""

    waiting: str
    running: str
    kv_cache_usage: str
    num_series: str
    freshest_sample: str
    itl_p99: str
    itl_count: str
    itl_sum: str
    ttft_p99: str
    ttft_count: str
    prompt_tokens: str
    cached_prompt_tokens: str
    output_tokens: str
    requests: str


def queries(target: ServiceTarget, window_s: float) -> Queries:
    sel = selector(target)
    window = f"[{max(1, round(window_s))}s]"
    itl = vllm_metrics.INTER_TOKEN_LATENCY_SECONDS
    ttft = vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS
    waiting = vllm_metrics.NUM_REQUESTS_WAITING

    def p99(family: str) -> str:
        return f"histogram_quantile(0.99, sum by (le) (rate({family}_bucket{sel}{window})))"

    def increase(family: str) -> str:
        return f"sum(increase({family}_total{sel}{window}))"

    return Queries(
        waiting=f"sum({waiting}{sel})",
        running=f"sum({vllm_metrics.NUM_REQUESTS_RUNNING}{sel})",
        kv_cache_usage=f"max({vllm_metrics.KV_CACHE_USAGE_PERC}{sel})",
        num_series=f"count({waiting}{sel})",
        freshest_sample=f"max(timestamp({waiting}{sel}))",
        itl_p99=p99(itl),
        itl_count=f"sum(increase({itl}_count{sel}{window}))",
        itl_sum=f"sum(increase({itl}_sum{sel}{window}))",
        ttft_p99=p99(ttft),
        ttft_count=f"sum(increase({ttft}_count{sel}{window}))",
        prompt_tokens=increase(vllm_metrics.PROMPT_TOKENS),
        cached_prompt_tokens=increase(vllm_metrics.PREFIX_CACHE_HITS),
        output_tokens=increase(vllm_metrics.GENERATION_TOKENS),
        requests=increase(vllm_metrics.REQUEST_SUCCESS),
    )


_COUNTED = (
    "waiting",
    "running",
    "kv_cache_usage",
    "num_series",
    "freshest_sample",
    "prompt_tokens",
    "cached_prompt_tokens",
    "output_tokens",
    "requests",
    "itl_sum",
)


class PrometheusSource:
    """Reads a service's signals from a Prometheus server; see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        window_s: float = METRICS_WINDOW_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.window_s = window_s
        self._timeout_s = timeout_s
        # No retries: the next evaluation is the retry.
        self._client = httpx.AsyncClient(
            base_url=url.rstrip("/"), timeout=httpx.Timeout(timeout_s), verify=False
        )

    async def read(self, target: ServiceTarget, now_s: float) -> Observation:
        exprs = queries(target, self.window_s)
        names = list(Queries.__dataclass_fields__)
        try:
            async with asyncio.timeout(self._timeout_s):
                # Every query is waited for, failed or not: gather alone would return at the
                # first error and leave the others running with nobody to read their errors
                # (a traceback at shutdown when Prometheus had gone, found by tests/chaos).
                answers = await asyncio.gather(
                    *(self._scalar(getattr(exprs, n)) for n in names), return_exceptions=True
                )
            failed = [a for a in answers if isinstance(a, BaseException)]
            if failed:
                raise failed[0]
            results = [a for a in answers if not isinstance(a, BaseException)]
        except (TimeoutError, httpx.TimeoutException):
            return self._blind(target, now_s, f"no answer within {self._timeout_s:g} s")
        # A refused connection, an error status or an answer that is not the query API's:
        # all mean the same thing here, this evaluation cannot see, so it holds.
        except (httpx.HTTPError, QueryError) as error:
            return self._blind(target, now_s, f"{type(error).__name__}: {error}")
        values = dict(zip(names, results, strict=True))
        return self._observation(target, now_s, values)

    async def _scalar(self, expr: str) -> tuple[float, float] | None:
        """(value, unix timestamp) of a single-series result; None for an empty result."""
        response = await self._client.get(
            "/api/v1/query", params={"query": expr, "timeout": f"{math.ceil(self._timeout_s)}s"}
        )
        return instant_value(response.status_code, response.text)

    def _blind(self, target: ServiceTarget, now_s: float, why: str) -> Observation:
        return Observation(
            observed_at_s=now_s,
            spec_replicas=target.spec_replicas,
            ready_replicas=target.ready_replicas,
            num_pods_expected=len(target.pods),
            num_pods_scraped=0,
            num_requests_waiting=None,
            num_requests_running=None,
            itl=None,
            ttft=None,
            problems=(f"prometheus at {self.url}: {why}",),
        )

    def _observation(
        self, target: ServiceTarget, now_s: float, values: dict[str, tuple[float, float] | None]
    ) -> Observation:
        problems = []
        # A count, a gauge or a timestamp that is NaN or infinite is no reading at all (never a
        # zero: read as one, it would scale a loaded fleet down). Quantiles keep their NaN:
        # _latency reads it together with the sample count.
        unreadable = [
            name
            for name in _COUNTED
            if values[name] is not None and not math.isfinite(values[name][0])  # type: ignore[index]
        ]
        if unreadable:
            problems.append(f"prometheus answered NaN or Inf for {', '.join(unreadable)}")
            values = {k: (None if k in unreadable else v) for k, v in values.items()}

        def value(name: str) -> float | None:
            found = values[name]
            return None if found is None else found[0]

        num_series = int(value("num_series") or 0)
        if num_series < len(target.pods):
            problems.append(
                f"prometheus has vLLM series for {num_series} of {len(target.pods)} ready pods "
                f"(selector {selector(target)})"
            )
        observed_at_s = now_s
        freshest = values["freshest_sample"]
        if freshest is not None:
            # Prometheus stamps in wall-clock seconds; carry the age over to the caller's clock.
            evaluated_at_unix, sample_unix = freshest[1], freshest[0]
            observed_at_s = now_s - max(0.0, evaluated_at_unix - sample_unix)
        return Observation(
            observed_at_s=observed_at_s,
            spec_replicas=target.spec_replicas,
            ready_replicas=target.ready_replicas,
            num_pods_expected=len(target.pods),
            num_pods_scraped=min(num_series, len(target.pods)),
            num_requests_waiting=value("waiting"),
            num_requests_running=value("running"),
            itl=_latency(
                value("itl_p99"), value("itl_count"), vllm_metrics.TOKEN_LATENCY_BUCKETS_S
            ),
            ttft=_latency(value("ttft_p99"), value("ttft_count"), vllm_metrics.TTFT_BUCKETS_S),
            kv_cache_usage=value("kv_cache_usage"),
            window_s=self.window_s,
            problems=tuple(problems),
            load=self._load(value),
        )

    def _load(self, value: Callable[[str], float | None]) -> Load | None:
        """The counters' increase over the window; None where the engines export none."""
        prompt = value("prompt_tokens")
        if prompt is None:
            return None
        return Load(
            self.window_s,
            prompt,
            value("cached_prompt_tokens") or 0.0,
            value("output_tokens") or 0.0,
            value("requests") or 0.0,
            num_pods=int(value("num_series") or 0),
            num_itl_gaps=value("itl_count") or 0.0,
            itl_sum_s=value("itl_sum") or 0.0,
        )

    async def aclose(self) -> None:
        await self._client.aclose()


class QueryError(ValueError):
    """An answer that is not a successful instant-vector result of the query API."""


def instant_value(status_code: int, body: str) -> tuple[float, float] | None:
    """(value, unix timestamp) of the first series of an instant query's answer; None when the
    vector is empty. Raises QueryError, quoting the server, for anything else."""
    try:
        answer = json.loads(body)
    except ValueError:
        raise QueryError(f"HTTP {status_code}, not JSON: {body[:80]!r}") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, dict) else None
        raise QueryError(f"HTTP {status_code}: {error or body[:80]!r}")
    result: Sequence[dict[str, Any]] = answer.get("data", {}).get("result") or []
    if not result:
        return None
    try:
        timestamp, value = result[0]["value"]
        return float(value), float(timestamp)
    except (KeyError, TypeError, ValueError):
        raise QueryError(f"not an instant vector: {body[:80]!r}") from None


def _latency(
    p99_s: float | None, count: float | None, bounds: Sequence[float]
) -> LatencyQuantile | None:
    if count is None:
        return None
    if count <= 0 or p99_s is None or math.isnan(p99_s):
        # rate() of an unchanged histogram is 0 in every bucket: quantile NaN, no traffic.
        return LatencyQuantile(math.nan, 0.0, None) if count <= 0 else None
    lower_s, upper_s = bucket_edges(bounds, p99_s)
    return LatencyQuantile(p99_s, count, upper_s, lower_s)
