"""The `direct` metrics source: scrape every ready engine pod's /metrics, needing nothing else.

All pods of all services are scraped concurrently through one shared httpx client (keep-alive
connections, a bounded number in flight); each scrape has a timeout, so a hung engine costs at
most `timeout_s`. The source remembers nothing: it returns this evaluation's samples
(`PodScrapes`), and the autoscaler's state machine keeps each pod's ring
(tokenpilot.core.autoscale.loop). A pod that refuses, times out, answers an error status or
something that is not Prometheus text is reported in `problems` and left out; the autoscaler
then holds rather than scale down on a partial view.
"""

from __future__ import annotations

import asyncio
import zlib

import httpx

from tokenpilot.adapters.metrics.base import PodEndpoint, ServiceTarget
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
NUM_CLIENT_SHARDS = 32
KEEPALIVE_S = 60.0


class DirectSource:
    """Scrapes engine pods itself; see the module docstring."""

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        # httpcore scans its whole pool for every request, which is quadratic with one
        # connection per engine; small pools picked by engine address keep it linear.
        # One TLS context for all shards: loading the CA bundle costs ~50 ms per client.
        tls = httpx.create_ssl_context()
        self._clients = [
            httpx.AsyncClient(
                verify=tls,
                timeout=httpx.Timeout(timeout_s),
                limits=httpx.Limits(
                    max_connections=None,
                    max_keepalive_connections=None,
                    # Longer than an evaluation interval, so every round reuses its connection.
                    keepalive_expiry=KEEPALIVE_S,
                ),
                # Engine pods are addressed by IP inside the cluster; a proxy would be wrong.
                trust_env=False,
            )
            for _ in range(NUM_CLIENT_SHARDS)
        ]
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
                client = self._clients[zlib.crc32(pod.metrics_url.encode()) % len(self._clients)]
                response = await client.get(pod.metrics_url)
            except httpx.TimeoutException:
                return f"no answer from {pod.metrics_url} within the scrape timeout"
            except httpx.HTTPError as error:
                return f"cannot reach {pod.metrics_url} ({type(error).__name__}: {error})"
        if response.status_code != 200:
            return f"{pod.metrics_url} answered HTTP {response.status_code}"
        try:
            sample = engine_sample(parse_metrics(response.text, families), now_s)
        except MetricsParseError as error:
            return f"{pod.metrics_url} answered garbage: {error}"
        if sample.num_requests_waiting is None or sample.num_requests_running is None:
            return f"{pod.metrics_url} has no vllm:num_requests_* gauges (is it a vLLM engine?)"
        return sample

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()
