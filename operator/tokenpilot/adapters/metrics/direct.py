"""The `direct` metrics source: scrape every ready engine pod's /metrics, needing nothing else.

All pods of all services are scraped concurrently through one shared PageClient (a kept-alive
connection per engine, a bounded number in flight); each scrape has a timeout, so a hung engine
costs at most `timeout_s`. The source remembers nothing: it returns this evaluation's samples
(`PodScrapes`), and the autoscaler's state machine keeps each pod's ring
(tokenpilot.core.autoscale.loop). A pod that refuses, times out, answers an error status or
something that is not Prometheus text is reported in `problems` and left out; the autoscaler
then holds rather than scale down on a partial view.
"""

from __future__ import annotations

import asyncio

from tokenpilot.adapters.metrics.base import PodEndpoint, ServiceTarget
from tokenpilot.adapters.metrics.pages import PageClient, PageError
from tokenpilot.adapters.metrics.parse import (
    ENGINE_FAMILIES,
    ENGINE_FAMILIES_WITH_TTFT,
    MetricsParseError,
    engine_sample,
    parse_metrics,
)
from tokenpilot.core.autoscale.window import EngineSample, PodScrapes

DEFAULT_TIMEOUT_S = 2.0
DEFAULT_MAX_IN_FLIGHT = 128


class DirectSource:
    """Scrapes engine pods itself; see the module docstring."""

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self._timeout_s = timeout_s
        self._pages = PageClient()
        self._in_flight = asyncio.Semaphore(max_in_flight)

    async def read(self, target: ServiceTarget, now_s: float) -> PodScrapes:
        families = ENGINE_FAMILIES_WITH_TTFT if target.read_ttft else ENGINE_FAMILIES
        results = await asyncio.gather(*(self._scrape(pod, families, now_s) for pod in target.pods))
        samples: dict[str, EngineSample] = {}
        problems = []
        for pod, result in zip(target.pods, results, strict=True):
            if isinstance(result, str):
                problems.append(f"pod {pod.name}: {result}")
            else:
                samples[pod.name] = result
        return PodScrapes(now_s, samples, len(target.pods), tuple(problems))

    async def _scrape(
        self, pod: PodEndpoint, families: frozenset[str], now_s: float
    ) -> EngineSample | str:
        """The pod's sample, or why there is none (a sentence for the Observation)."""
        async with self._in_flight:
            try:
                page = await self._pages.get(pod.metrics_url, self._timeout_s)
            except TimeoutError:
                return f"no answer from {pod.metrics_url} within the scrape timeout"
            except PageError as error:
                return f"{pod.metrics_url}: {error}"
            except (OSError, EOFError) as error:
                why = str(error) or "the connection closed"
                return f"cannot reach {pod.metrics_url} ({type(error).__name__}: {why})"
        if page.status != 200:
            return f"{pod.metrics_url} answered HTTP {page.status}"
        try:
            sample = engine_sample(parse_metrics(page.text, families), now_s)
        except MetricsParseError as error:
            return f"{pod.metrics_url} answered garbage: {error}"
        if sample.num_requests_waiting is None or sample.num_requests_running is None:
            return f"{pod.metrics_url} has no vllm:num_requests_* gauges (is it a vLLM engine?)"
        return sample

    async def aclose(self) -> None:
        await self._pages.aclose()
