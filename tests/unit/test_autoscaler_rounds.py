"""A round of the autoscaler over many services: a bounded number at a time, and each one's
time limit counting its own work, not its wait for a turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import pytest

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.metrics import PodEndpoint
from tokenpilot.handlers import autoscaler
from tokenpilot.handlers.autoscaler import (
    FALLBACK_INTERVAL_S,
    AutoscalerConfig,
    AutoscalerRuntime,
    Evaluator,
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


@pytest.fixture
async def runtime() -> AsyncIterator[AutoscalerRuntime]:
    rt = AutoscalerRuntime(AutoscalerConfig())
    yield rt
    await rt.sources.aclose()


def _evaluator(
    runtime: AutoscalerRuntime, api: SharedApi, num_services: int, max_under_way: int
) -> tuple[Evaluator, list[tuple[tuple[str, str], dict[str, Any], tuple[PodEndpoint, ...]]]]:
    # No API server: every loop is given, so the evaluator never builds one that would call it.
    client = cast(KubeClient, None)
    evaluator = Evaluator(runtime, client, max_under_way=max_under_way)
    due = []
    for index in range(num_services):
        key = ("team", f"svc-{index}")
        loop = QueueingLoop(runtime, client, *key)
        loop.api = api
        evaluator.loops[key] = loop
        due.append((key, {}, ()))
    return evaluator, due


async def test_a_round_runs_at_most_its_bound_at_once_and_evaluates_every_service(
    runtime: AutoscalerRuntime,
) -> None:
    api = SharedApi(call_s=0.001)
    evaluator, due = _evaluator(runtime, api, num_services=50, max_under_way=4)
    waits = await evaluator.evaluate_all(due)
    assert waits == [ITS_INTERVAL_S] * 50
    assert api.most_under_way == 4


async def test_waiting_for_a_turn_does_not_use_up_the_time_limit(
    runtime: AutoscalerRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 20 calls of 25 ms queue for 0.5 s in all; each evaluation's own work is a tenth of the
    # limit. Started all at once, the later ones would spend the limit waiting and be held.
    monkeypatch.setattr(autoscaler, "EVALUATION_TIMEOUT_S", 0.25)
    api = SharedApi(call_s=0.025)
    evaluator, due = _evaluator(runtime, api, num_services=20, max_under_way=1)
    waits = await evaluator.evaluate_all(due)
    assert FALLBACK_INTERVAL_S not in waits
    assert waits == [ITS_INTERVAL_S] * 20
