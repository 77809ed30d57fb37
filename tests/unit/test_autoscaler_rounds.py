"""A round of the autoscaler over many services: a bounded number at a time, and each one's
time limit counting its own work, not its wait for a turn. Run in virtual time
(_virtual_time.py), so every call lasts exactly what it says."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import pytest
from _virtual_time import run_virtual

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.metrics import PodEndpoint
from tokenpilot.runtime.evaluator import ROUND_S, Due, Evaluator
from tokenpilot.runtime.service_loop import (
    FALLBACK_INTERVAL_S,
    AutoscalerConfig,
    AutoscalerRuntime,
    ServiceLoop,
)

# What each service's evaluation asks to wait when it ends in time.
ITS_INTERVAL_S = 7.0


@dataclass
class SharedApi:
    """The one thing every evaluation queues for (the API server and the thread pool behind
    it): one call at a time, `call_s` each."""

    call_s: float
    under_way: int = 0
    most_under_way: int = 0

    def __post_init__(self) -> None:
        self.lock = asyncio.Lock()


class QueueingLoop(ServiceLoop):
    """A service whose evaluation makes one call to the shared API."""

    api: SharedApi

    async def evaluate(self, body: Mapping[str, Any], pods: tuple[PodEndpoint, ...]) -> float:
        self.api.under_way += 1
        self.api.most_under_way = max(self.api.most_under_way, self.api.under_way)
        try:
            async with self.api.lock:
                await asyncio.sleep(self.api.call_s)
        finally:
            self.api.under_way -= 1
        return ITS_INTERVAL_S


async def _round(
    api: SharedApi, num_services: int, max_under_way: int, timeout_s: float
) -> list[float]:
    runtime = AutoscalerRuntime(AutoscalerConfig())
    # No API server: every loop is given, so the evaluator never builds one that would call it.
    client = cast(KubeClient, None)
    evaluator = Evaluator(
        runtime, client, max_under_way=max_under_way, evaluation_timeout_s=timeout_s
    )
    due: list[Due] = []
    for index in range(num_services):
        key = ("team", f"svc-{index}")
        loop = QueueingLoop(runtime, client, *key)
        loop.api = api
        evaluator.loops[key] = loop
        due.append((key, {}, ()))
    try:
        return await evaluator.evaluate_all(due)
    finally:
        await runtime.sources.aclose()


def test_a_round_runs_at_most_its_bound_at_once_and_evaluates_every_service() -> None:
    api = SharedApi(call_s=0.001)
    waits = run_virtual(_round(api, num_services=50, max_under_way=4, timeout_s=30.0))
    assert waits == [ITS_INTERVAL_S] * 50
    assert api.most_under_way == 4


def test_waiting_for_a_turn_does_not_use_up_the_time_limit() -> None:
    # 20 calls of 25 s queue for 500 s in all; each evaluation's own work is a tenth of its
    # limit. Started all at once, the later ones would spend the limit waiting and be held.
    api = SharedApi(call_s=25.0)
    waits = run_virtual(_round(api, num_services=20, max_under_way=1, timeout_s=250.0))
    assert FALLBACK_INTERVAL_S not in waits
    assert waits == [ITS_INTERVAL_S] * 20


def test_an_evaluation_over_its_limit_waits_the_fallback_interval() -> None:
    # One call of 40 s against a 30 s limit: the service is looked at again soon.
    waits = run_virtual(
        _round(SharedApi(call_s=40.0), num_services=1, max_under_way=1, timeout_s=30.0)
    )
    assert waits == [FALLBACK_INTERVAL_S]


def gaps_count_and_sum(runtime: AutoscalerRuntime) -> tuple[float, float]:
    """How many start-to-start gaps the operator measured, and their total in seconds."""
    samples = runtime.metrics.evaluation_gap_s.collect()[0].samples
    count = next(s.value for s in samples if s.name.endswith("_count"))
    total = next(s.value for s in samples if s.name.endswith("_sum"))
    return count, total


@dataclass
class StepClock:
    """A clock the test moves."""

    at_s: float = 100.0

    def monotonic_s(self) -> float:
        return self.at_s

    def now_rfc3339(self) -> str:
        return "2026-12-02T00:00:00Z"


def test_the_gap_between_a_services_evaluations_is_measured_start_to_start() -> None:
    clock = StepClock()
    runtime = AutoscalerRuntime(AutoscalerConfig(), clock=clock)
    client = cast(KubeClient, None)
    evaluator = Evaluator(runtime, client)
    key = ("team", "svc")
    loop = QueueingLoop(runtime, client, *key)
    loop.api = SharedApi(call_s=0.0)
    evaluator.loops[key] = loop

    async def rounds() -> None:
        try:
            for gap_s in (0.0, 5.0, 12.0):
                clock.at_s += gap_s
                await evaluator.evaluate_all([(key, {}, ())])
        finally:
            await runtime.sources.aclose()

    run_virtual(rounds())
    assert gaps_count_and_sum(runtime) == (2.0, 17.0)  # the first evaluation has no gap before it


@dataclass
class LoopClock:
    """The event loop's (virtual) time as the runtime's clock."""

    def monotonic_s(self) -> float:
        return asyncio.get_running_loop().time()

    def now_rfc3339(self) -> str:
        return "2026-12-02T00:00:00Z"


def test_rounds_share_listings_and_each_service_keeps_its_interval(monkeypatch: Any) -> None:
    """200 services whose evaluations have drifted apart (each first seen at its own moment)
    are listed about once every ROUND_S, not once per evaluation, and each is evaluated every
    ITS_INTERVAL_S on average, neither more often nor less."""
    from tokenpilot.runtime import evaluator as module

    num_services, span_s = 200, 140.0
    listings: list[float] = []
    bodies = [
        {
            "metadata": {"namespace": "team", "name": f"svc-{i}"},
            "spec": {"autoscaling": {"enabled": True}},
        }
        for i in range(num_services)
    ]

    def listed(*_: Any) -> list[dict[str, Any]]:
        listings.append(asyncio.get_event_loop().time())
        return bodies

    monkeypatch.setattr(module, "list_llmservices", listed)
    monkeypatch.setattr(module, "ready_engine_pods_by_service", lambda *_: {})
    runtime = AutoscalerRuntime(AutoscalerConfig(), clock=LoopClock())
    client = cast(KubeClient, None)
    evaluator = Evaluator(runtime, client)
    api = SharedApi(call_s=0.0005)
    for index in range(num_services):
        key = ("team", f"svc-{index}")
        loop = QueueingLoop(runtime, client, *key)
        loop.api = api
        evaluator.loops[key] = loop
        # Spread over one interval, as services created or resumed at different times are.
        evaluator.due_s[key] = ITS_INTERVAL_S * index / num_services

    async def rounds() -> None:
        async def to_thread(fn: Any, *args: Any) -> Any:
            return fn(*args)

        monkeypatch.setattr(module.asyncio, "to_thread", to_thread)
        try:
            while asyncio.get_running_loop().time() < span_s:
                await asyncio.sleep(await evaluator.round())
        finally:
            await runtime.sources.aclose()

    run_virtual(rounds())
    count, total = gaps_count_and_sum(runtime)
    assert total / count == pytest.approx(ITS_INTERVAL_S, rel=0.01)
    assert len(listings) / span_s <= 1.1 / ROUND_S, len(listings)
