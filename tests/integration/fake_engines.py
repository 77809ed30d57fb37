"""Local HTTP servers on 127.0.0.1 that answer /metrics like vLLM engines (or fail to).

Each engine renders its page with prometheus_client from vLLM's metric table, so the text is
real exposition format with vLLM's names, labels and bucket edges. Every scrape first records
`itl_per_scrape` inter-token latencies, so histograms grow between scrapes as under load.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from tokenpilot.core import vllm_metrics

LABELS = {"model_name": "tiny", "engine": "0"}


@dataclass
class FakeEngine:
    """One engine's behaviour; change the fields between scrapes to change what it reports."""

    waiting: float = 0.0
    running: float = 0.0
    kv_cache_usage: float = 0.1
    itl_samples_s: tuple[float, ...] = (0.02,)
    itl_per_scrape: int = 100
    mode: str = "ok"  # ok | garbage | error | hang
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    _cycle: Iterable[float] = field(init=False)

    def __post_init__(self) -> None:
        names = list(LABELS)
        self._waiting = Gauge(vllm_metrics.NUM_REQUESTS_WAITING, "w", names, registry=self.registry)
        self._running = Gauge(vllm_metrics.NUM_REQUESTS_RUNNING, "r", names, registry=self.registry)
        self._kv = Gauge(vllm_metrics.KV_CACHE_USAGE_PERC, "kv", names, registry=self.registry)
        self._itl = Histogram(
            vllm_metrics.INTER_TOKEN_LATENCY_SECONDS,
            "itl",
            names,
            buckets=vllm_metrics.TOKEN_LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self._ttft = Histogram(
            vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS,
            "ttft",
            names,
            buckets=vllm_metrics.TTFT_BUCKETS_S,
            registry=self.registry,
        )
        self._cycle = itertools.cycle(self.itl_samples_s)

    def page(self) -> bytes:
        itl = self._itl.labels(**LABELS)
        self._cycle = itertools.cycle(self.itl_samples_s)
        for _, latency_s in zip(range(self.itl_per_scrape), self._cycle, strict=False):
            itl.observe(latency_s)
        self._ttft.labels(**LABELS)
        self._waiting.labels(**LABELS).set(self.waiting)
        self._running.labels(**LABELS).set(self.running)
        self._kv.labels(**LABELS).set(self.kv_cache_usage)
        return generate_latest(self.registry)


class EngineFarm:
    """Serves each FakeEngine on its own 127.0.0.1 port from one aiohttp runner."""

    def __init__(self, engines: list[FakeEngine]) -> None:
        self.engines = engines
        self.ports: list[int] = []
        self._by_port: dict[int, FakeEngine] = {}
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> EngineFarm:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        for engine in self.engines:
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.ports.append(port)
            self._by_port[port] = engine
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports[index]}/metrics"

    async def _metrics(self, request: web.Request) -> web.Response:
        port = request.transport.get_extra_info("sockname")[1]  # type: ignore[union-attr]
        engine = self._by_port[port]
        if engine.mode == "garbage":
            return web.Response(text="<html><body>502 Bad Gateway</body></html>")
        if engine.mode == "error":
            return web.Response(status=500, text="engine dead")
        if engine.mode == "hang":
            await asyncio.sleep(30)
        return web.Response(body=engine.page(), content_type="text/plain")


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections for as long as the block runs.

    The socket stays bound without listening: a released port could be taken by another
    server meanwhile and answer, where the test needs a refusal.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
