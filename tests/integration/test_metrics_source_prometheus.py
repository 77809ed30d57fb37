"""The prometheus metrics source against a real Prometheus server scraping local engines.

The test starts Debian's `prometheus` with a static scrape config that labels the engines'
series with `namespace` and `llmservice`, as the in-cluster scrape config does by relabelling
the pods' labels. (The dev-cluster variant, with kubernetes_sd against the API server, belongs
with the cluster tests.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from fake_engines import EngineFarm, FakeEngine, closed_port

from tokenpilot.adapters.metrics import PodEndpoint, PrometheusSource, ServiceTarget
from tokenpilot.core.autoscale import (
    AutoscalePolicy,
    Evidence,
    History,
    Mode,
    Observation,
    Reason,
    decide,
)
from tokenpilot_lab.prometheus_server import running_prometheus

pytestmark = pytest.mark.prometheus

POLICY = AutoscalePolicy(min_replicas=1, max_replicas=8, itl_p99_slo_s=0.05)
WINDOW_S = 10.0
TAIL_AT_HALF_PERCENT = (0.02,) * 199 + (0.06,)
# Nine queries on a loopback server answer in milliseconds; the bound is for a machine busy
# with the rest of the suite, where the source's 3 s default could turn a slow answer blind.
QUERY_TIMEOUT_S = 15.0


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    """Poll `check` every 0.5 s until it holds; fail naming `what` after `timeout_s`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.5)


def scrape_config(targets: list[str]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                "job_name": "engines",
                "static_configs": [
                    {"targets": targets, "labels": {"namespace": "ns", "llmservice": "llm"}}
                ],
            }
        ],
    }


@pytest.fixture
async def farm_and_prometheus(tmp_path) -> AsyncIterator[tuple[EngineFarm, str]]:
    # A 0.5% tail: at exactly 1% the P99's rank sits on a bucket edge, and the float sums
    # across engines decide whether PromQL answers 25 ms or just over the 50 ms SLO.
    engines = [
        FakeEngine(waiting=3, running=12, itl_samples_s=TAIL_AT_HALF_PERCENT, itl_per_scrape=200)
        for _ in range(4)
    ]
    async with EngineFarm(engines) as farm:
        targets = [f"127.0.0.1:{port}" for port in farm.ports]
        with contextlib.ExitStack() as stack:
            # Started from a worker thread: the farm serves from this event loop meanwhile.
            url = await asyncio.to_thread(
                stack.enter_context, running_prometheus(scrape_config(targets), tmp_path)
            )
            try:
                yield farm, url
            finally:
                await asyncio.to_thread(stack.close)


def service(farm: EngineFarm) -> ServiceTarget:
    pods = tuple(PodEndpoint(f"llm-{i}", farm.url(i)) for i in range(len(farm.ports)))
    return ServiceTarget("ns", "llm", len(pods), len(pods), pods)


async def test_reads_the_same_signals_through_promql(farm_and_prometheus):
    farm, url = farm_and_prometheus
    source = PrometheusSource(url, window_s=WINDOW_S, timeout_s=QUERY_TIMEOUT_S)
    seen: list[Observation] = []
    try:

        async def has_window() -> bool:
            seen.append(await source.read(service(farm), 100.0))
            latest = seen[-1]
            return latest.num_pods_scraped == 4 and latest.itl is not None and not latest.itl.idle

        await eventually(has_window, 30, "four engines scraped with a P99 ITL")
    finally:
        await source.aclose()
    # The observation that met the condition is the one judged: a later one could meet a
    # scrape that a busy machine let time out.
    observation = seen[-1]
    assert observation.problems == ()
    assert observation.num_requests_waiting == 12 and observation.num_requests_running == 48
    assert observation.itl is not None
    assert 0.01 < observation.itl.p99_s <= 0.025 and observation.itl.upper_bound_s == 0.025
    assert observation.kv_cache_usage == pytest.approx(0.1)
    assert 100.0 - observation.observed_at_s < 5.0  # fresh: scraped within the last seconds
    decision = decide(POLICY, History(), Evidence(observation), 100.0)
    assert decision.mode is Mode.steady


async def test_a_garbage_engine_makes_a_partial_view_and_a_hold(farm_and_prometheus):
    farm, url = farm_and_prometheus
    source = PrometheusSource(url, window_s=WINDOW_S, timeout_s=QUERY_TIMEOUT_S)
    seen: list[Observation] = []
    try:

        async def all_four() -> bool:
            seen.append(await source.read(service(farm), 0.0))
            latest = seen[-1]
            return latest.num_pods_scraped == 4 and latest.itl is not None and not latest.itl.idle

        await eventually(all_four, 30, "four engines scraped with a P99 ITL")
        farm.engines[2].mode = "garbage"

        async def three_left() -> bool:
            seen.append(await source.read(service(farm), 0.0))
            return seen[-1].num_pods_scraped == 3

        await eventually(three_left, 30, "the garbage engine's series to go stale")
    finally:
        await source.aclose()
    observation = seen[-1]
    decision = decide(POLICY, History(calm_since_s=-1000.0), Evidence(observation), 0.0)
    assert (decision.desired_replicas, decision.reason_code) == (4, Reason.partial_scrape)
    assert "3 of 4" in decision.reason


async def test_unreachable_prometheus_holds_and_says_where():
    pods = tuple(PodEndpoint(f"llm-{i}", "unused") for i in range(3))
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}"
        source = PrometheusSource(url, timeout_s=2)
        try:
            observation = await source.read(ServiceTarget("ns", "llm", 3, 3, pods), 0.0)
        finally:
            await source.aclose()
    decision = decide(POLICY, History(calm_since_s=-1000.0), Evidence(observation), 0.0)
    assert (decision.desired_replicas, decision.reason_code) == (3, Reason.missing_metrics)
    assert url in decision.reason
