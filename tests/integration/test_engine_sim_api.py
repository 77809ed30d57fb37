"""engine-sim over HTTP: vLLM's request and response shapes, its errors, and disconnects."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tokenpilot_lab.engine_sim.server import EngineSimServer, ServedModel, running
from tokenpilot_lab.sim import EngineConfig
from tokenpilot_lab.sim.tokens import count_text_tokens

MODEL = "sim-model"
MAX_MODEL_LEN = 2048


@dataclass(frozen=True)
class FlatTimer:
    """Every step takes 10 ms of engine time, whatever it carries."""

    step_s: float = 0.010

    def iteration_s(
        self, num_decodes: int, decode_context_tokens: int, prefill_chunks: object = ()
    ) -> float:
        return self.step_s


@pytest.fixture
async def sim() -> AsyncIterator[tuple[EngineSimServer, httpx.AsyncClient]]:
    config = EngineConfig(num_kv_blocks=2048, max_model_len=MAX_MODEL_LEN, record_itl=False)
    served = ServedModel((MODEL,), MODEL, MAX_MODEL_LEN)
    # 20x faster than real time: a 10 ms step takes half a millisecond.
    async with (
        running(config, FlatTimer(), served, time_scale=20.0) as (server, url),
        httpx.AsyncClient(base_url=url, timeout=30.0) as client,
    ):
        yield server, client


def sse_events(body: str) -> list[str]:
    return [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: ")]


async def metric(client: httpx.AsyncClient, sample: str, **labels: str) -> float:
    text = (await client.get("/metrics")).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and labels.items() <= s.labels.items():
                return float(s.value)
    raise AssertionError(f"{sample} {labels} not in /metrics")


async def test_completion_returns_max_tokens_and_usage(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    prompt = "The quick brown fox jumps over the lazy dog."
    r = await client.post(
        "/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 7}
    )
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {
        "prompt_tokens": count_text_tokens(prompt),
        "completion_tokens": 7,
        "total_tokens": count_text_tokens(prompt) + 7,
    }
    # The generated text counts back to the tokens generated.
    assert count_text_tokens(body["choices"][0]["text"]) == 7


async def test_token_id_prompt_counts_its_ids(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    r = await client.post("/v1/completions", json={"prompt": list(range(300)), "max_tokens": 2})
    assert r.json()["usage"]["prompt_tokens"] == 300


async def test_streamed_completion_sends_one_chunk_per_token_then_done(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    r = await client.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": "hi", "max_tokens": 5, "stream": True, "ignore_eos": True},
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 5
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["length"]
    assert all(c["object"] == "text_completion" for c in chunks)
    # Engine time stamps rise by one 10 ms step per token.
    stamps = [c["engine_time_s"] for c in chunks]
    assert [round(b - a, 6) for a, b in itertools.pairwise(stamps)] == [0.01] * 4


async def test_streamed_chat_starts_with_the_role_and_ends_with_usage(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    r = await client.post(
        "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    chunks = [json.loads(e) for e in sse_events(r.text)[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["delta"]["content"] for c in chunks[1:4]] == [" the", " sim", " says"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3


async def test_chat_without_max_tokens_may_fill_the_context(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    r = await client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x " * 2000}], "stream": False},
    )
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["usage"]["total_tokens"] == MAX_MODEL_LEN


@pytest.mark.parametrize(
    ("path", "payload", "status", "error_type", "param"),
    [
        ("/v1/completions", {"model": "other", "prompt": "hi"}, 404, "NotFoundError", "model"),
        (
            "/v1/completions",
            {"prompt": list(range(MAX_MODEL_LEN + 1))},
            400,
            "BadRequestError",
            "prompt",
        ),
        (
            "/v1/completions",
            {"prompt": "hi", "max_tokens": -1},
            400,
            "BadRequestError",
            "max_tokens",
        ),
        (
            "/v1/completions",
            {"prompt": list(range(2000)), "max_tokens": 100},
            400,
            "BadRequestError",
            "max_tokens",
        ),
        ("/v1/completions", {"prompt": ""}, 400, "BadRequestError", "prompt"),
        ("/v1/completions", {"prompt": {"a": 1}}, 400, "BadRequestError", "prompt"),
        ("/v1/completions", {"prompt": "hi", "n": 2}, 400, "BadRequestError", "n"),
        (
            "/v1/completions",
            {"prompt": "hi", "stream": True, "stream_options": [1]},
            400,
            "BadRequestError",
            "stream_options",
        ),
        (
            "/v1/completions",
            {"prompt": list(range(MAX_MODEL_LEN))},
            400,
            "BadRequestError",
            "prompt",
        ),
        ("/v1/chat/completions", {"messages": []}, 400, "BadRequestError", "messages"),
        (
            "/v1/chat/completions",
            {"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
            404,
            "NotFoundError",
            "model",
        ),
    ],
)
async def test_bad_requests_get_vllms_error_shape_and_status(  # type: ignore[no-untyped-def]
    sim, path: str, payload: dict[str, object], status: int, error_type: str, param: str
) -> None:
    _, client = sim
    r = await client.post(path, json=payload)
    assert r.status_code == status
    error = r.json()["error"]
    assert error["type"] == error_type and error["code"] == status and error["param"] == param
    assert error["message"]
    assert (await client.get("/health")).status_code == 200  # and the server lives on


async def test_malformed_json_is_a_400_not_a_crash(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    r = await client.post("/v1/completions", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"


async def test_models_lists_every_served_name(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    data = (await client.get("/v1/models")).json()["data"]
    assert [m["id"] for m in data] == [MODEL]
    assert data[0]["max_model_len"] == MAX_MODEL_LEN


async def eventually_zero(client: httpx.AsyncClient, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        running_now = await metric(client, "vllm:num_requests_running")
        waiting_now = await metric(client, "vllm:num_requests_waiting")
        kv_now = await metric(client, "vllm:kv_cache_usage_perc")
        if running_now == waiting_now == kv_now == 0:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"gauges stuck at {running_now}, {waiting_now}, {kv_now}")
        await asyncio.sleep(0.05)


async def test_a_client_that_disconnects_mid_stream_frees_its_sequence(sim) -> None:  # type: ignore[no-untyped-def]
    server, client = sim
    body = {"prompt": list(range(500)), "max_tokens": 1500, "stream": True}
    seen = 0
    async with client.stream("POST", "/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            seen += line.startswith("data: {")
            if seen == 5:
                # Mid-stream: the sequence runs and holds KV blocks.
                assert await metric(client, "vllm:num_requests_running") == 1
                assert await metric(client, "vllm:kv_cache_usage_perc") > 0
                break
    # The stream is closed: the sequence and its KV blocks go.
    await eventually_zero(client)
    assert server.driver.engine.idle
    assert await metric(client, "vllm:generation_tokens_total") < 1500
    assert await metric(client, "vllm:request_success_total", finished_reason="abort") == 1


async def test_a_client_that_gives_up_while_queued_frees_its_place(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    body = {"prompt": list(range(100)), "max_tokens": 1900}
    with pytest.raises(httpx.TimeoutException):
        await client.post("/v1/completions", json=body, timeout=0.2)
    await eventually_zero(client)


async def test_metrics_count_what_was_served(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    await asyncio.gather(
        *(
            client.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 4})
            for _ in range(3)
        )
    )
    assert await metric(client, "vllm:generation_tokens_total") == 12
    assert await metric(client, "vllm:request_success_total", finished_reason="length") == 3
    assert await metric(client, "vllm:request_success_total", finished_reason="stop") == 0
    assert await metric(client, "vllm:e2e_request_latency_seconds_count") == 3
    # Three tokens after the first per request, each one 10 ms engine step apart.
    assert await metric(client, "vllm:inter_token_latency_seconds_count") == 9
    # In engine seconds (10 ms a step), not the 0.5 ms of wall time a step takes at 20x.
    itl_sum = await metric(client, "vllm:inter_token_latency_seconds_sum")
    assert itl_sum == pytest.approx(0.09)


async def test_iteration_tokens_count_as_vllm_does(sim) -> None:  # type: ignore[no-untyped-def]
    _, client = sim
    await client.post("/v1/completions", json={"prompt": list(range(300)), "max_tokens": 3})
    # One step finishes the 300-token prompt and samples a token (301), two more sample one.
    assert await metric(client, "vllm:iteration_tokens_total_count") == 3
    assert await metric(client, "vllm:iteration_tokens_total_sum") == 303
    assert await metric(client, "vllm:iteration_tokens_total_bucket", le="1.0") == 2
    assert await metric(client, "vllm:prompt_tokens_total") == 300
