"""Real vLLM serves the tiny model: plain and streamed completions, chat, and its own errors."""

from __future__ import annotations

import json

import httpx
import pytest

from tokenpilot_lab.vllm_server import VllmServer

pytestmark = pytest.mark.engine

TIMEOUT_S = 120.0


def _post(server: VllmServer, path: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", json=body, timeout=TIMEOUT_S)


def _explain(response: httpx.Response, server: VllmServer) -> str:
    return f"{response.status_code} {response.text[:2000]}\n{server.log_tail()}"


def test_completion_returns_max_tokens_tokens(vllm_server: VllmServer) -> None:
    model = vllm_server.config.served_model_name
    body = {"model": model, "prompt": "Hello", "max_tokens": 12, "ignore_eos": True}
    response = _post(vllm_server, "/v1/completions", body)

    assert response.status_code == 200, _explain(response, vllm_server)
    payload = response.json()
    assert payload["model"] == model
    assert payload["choices"][0]["finish_reason"] == "length"
    assert payload["usage"]["completion_tokens"] == 12


def test_streaming_completion_streams_tokens_as_they_come(vllm_server: VllmServer) -> None:
    model = vllm_server.config.served_model_name
    body = {
        "model": model,
        "prompt": "Hello",
        "max_tokens": 32,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream(
        "POST", f"{vllm_server.base_url}/v1/completions", json=body, timeout=TIMEOUT_S
    ) as response:
        if response.status_code != 200:
            response.read()  # so the failure message can show the body
        assert response.status_code == 200, _explain(response, vllm_server)
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]

    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    token_events = [e for e in events if e.get("choices")]
    usage_events = [e for e in events if e.get("usage")]
    # vLLM may put several tokens in one event when the client reads slower than it decodes,
    # so the count of events is at most the count of tokens, not equal to it.
    assert 2 <= len(token_events) <= 32
    assert token_events[-1]["choices"][0]["finish_reason"] == "length"
    assert usage_events[-1]["usage"]["completion_tokens"] == 32


def test_chat_completion_uses_the_chat_template(vllm_server: VllmServer) -> None:
    model = vllm_server.config.served_model_name
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    response = _post(vllm_server, "/v1/chat/completions", body)

    assert response.status_code == 200, _explain(response, vllm_server)
    assert response.json()["choices"][0]["message"]["role"] == "assistant"


@pytest.mark.parametrize(
    ("case", "body", "status"),
    [
        ("unknown model", {"model": "no-such-model", "prompt": "hi", "max_tokens": 1}, 404),
        ("negative max_tokens", {"prompt": "hi", "max_tokens": -1}, 400),
        ("prompt over max model len", {"prompt": [5] * 2000, "max_tokens": 1}, 400),
    ],
)
def test_bad_requests_get_vllms_error_status(
    vllm_server: VllmServer, case: str, body: dict[str, object], status: int
) -> None:
    # The engine simulator copies these statuses; this pins what real vLLM does.
    body = {"model": vllm_server.config.served_model_name, **body}
    response = _post(vllm_server, "/v1/completions", body)

    assert response.status_code == status, f"{case}: {_explain(response, vllm_server)}"
    assert "error" in response.json(), case
