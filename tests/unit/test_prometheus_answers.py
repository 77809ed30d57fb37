"""The Prometheus source reads the query API's answers, and says what was wrong with any other."""

from __future__ import annotations

import json

import pytest

from tokenpilot.adapters.metrics.prometheus import QueryError, instant_value


def answer(result: list[dict[str, object]]) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def test_the_first_series_value_and_its_timestamp() -> None:
    body = answer([{"metric": {}, "value": [1767225600.5, "12"]}])
    assert instant_value(200, body) == (12.0, 1767225600.5)


def test_an_empty_vector_is_no_value() -> None:
    assert instant_value(200, answer([])) is None


def test_nan_is_a_value() -> None:
    value = instant_value(200, answer([{"metric": {}, "value": [1.0, "NaN"]}]))
    assert value is not None and value[0] != value[0]


@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        (400, '{"status":"error","errorType":"bad_data","error":"parse error"}', "parse error"),
        (502, "<html>bad gateway</html>", "not JSON"),
        (200, '{"status":"success","data":{"result":[{"value":"x"}]}}', "not an instant vector"),
    ],
)
def test_anything_else_is_a_query_error_quoting_the_server(
    status: int, body: str, words: str
) -> None:
    with pytest.raises(QueryError, match=words):
        instant_value(status, body)


def test_nan_counts_are_no_reading_not_zero_load() -> None:
    """Found by tests/chaos: a Prometheus answering NaN to every query crashed the evaluation
    (int(NaN)); read as zeros it would have scaled a loaded fleet down."""
    import asyncio
    import math

    from tokenpilot.adapters.metrics.base import PodEndpoint, ServiceTarget
    from tokenpilot.adapters.metrics.prometheus import PrometheusSource, Queries

    pods = tuple(PodEndpoint(f"p{i}", f"http://127.0.0.{i}:8000/metrics") for i in (1, 2))
    target = ServiceTarget("ns", "svc", spec_replicas=2, ready_replicas=2, pods=pods)
    source = PrometheusSource("http://127.0.0.1:9")
    nan = {name: (math.nan, 1.0) for name in Queries.__dataclass_fields__}
    observation = source._observation(target, 100.0, nan)
    asyncio.run(source.aclose())
    assert observation.num_requests_waiting is None
    assert observation.num_pods_scraped == 0
    assert any("NaN" in p for p in observation.problems)
    assert observation.load is None  # NaN token counters are no demand, not a NaN one


def test_a_failed_query_leaves_no_other_query_running() -> None:
    """Found by tests/chaos: one refused query returned from the evaluation while the other
    queries ran on, and their errors surfaced as a traceback when the operator stopped."""
    import asyncio

    import httpx

    from tokenpilot.adapters.metrics.base import PodEndpoint, ServiceTarget
    from tokenpilot.adapters.metrics.prometheus import PrometheusSource

    async def prometheus(request: httpx.Request) -> httpx.Response:
        if "count(" in request.url.params["query"]:
            raise httpx.ConnectError("All connection attempts failed", request=request)
        await asyncio.sleep(0.2)
        raise httpx.ConnectError("All connection attempts failed", request=request)

    async def observe_then_look() -> tuple[list[str], set[asyncio.Task[object]]]:
        source = PrometheusSource("http://prometheus.test", timeout_s=5)
        source._client = httpx.AsyncClient(
            base_url="http://prometheus.test", transport=httpx.MockTransport(prometheus)
        )
        pods = (PodEndpoint("p1", "http://127.0.0.1:8000/metrics"),)
        target = ServiceTarget("ns", "svc", spec_replicas=1, ready_replicas=1, pods=pods)
        observation = await source.read(target, 100.0)
        left = asyncio.all_tasks() - {asyncio.current_task()}
        await source.aclose()
        return list(observation.problems), left  # type: ignore[return-value]

    problems, left = asyncio.run(observe_then_look())
    assert left == set()
    assert problems and "ConnectError" in problems[0]
