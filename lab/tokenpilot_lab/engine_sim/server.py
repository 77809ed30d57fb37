"""The HTTP face of the engine simulator: vLLM's OpenAI-compatible API and /metrics.

Routes: POST /v1/completions and /v1/chat/completions (SSE streaming or one JSON body),
GET /v1/models, /health, /metrics, /version. Errors have vLLM's shape,
`{"error": {"message", "type", "param", "code"}}`, with its status codes: 400 for a request
the model cannot take (prompt over max_model_len, negative max_tokens, malformed body) and
404 for a model name this server does not serve. A client that goes away mid-request has
its sequence aborted, which frees its KV blocks. With a `Handoff` the engine takes its part in
disaggregated serving (engine_sim.handoff): `kv_transfer_params` in a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tokenpilot.core.roofline import StepWork
from tokenpilot_lab.engine_sim.driver import EngineDriver, RequestStream, ScaledClock
from tokenpilot_lab.engine_sim.handoff import Handoff, HandoffError, wanted
from tokenpilot_lab.engine_sim.metrics import EngineMetrics
from tokenpilot_lab.sim import Engine, EngineConfig, InvalidRequest, SimRequest, StepTimer
from tokenpilot_lab.sim.prefix import token_block_hashes
from tokenpilot_lab.sim.tokens import chat_token_ids, text_token_ids, token_text

log = logging.getLogger("tokenpilot.engine_sim")

# OpenAI's (and vLLM's) default max_tokens for the legacy completions API.
_COMPLETIONS_DEFAULT_MAX_TOKENS = 16
_VERSION = "0.0.0+tokenpilot-engine-sim"


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @property
    def error_type(self) -> str:
        return {404: "NotFoundError", 400: "BadRequestError"}.get(self.status, "InternalError")

    def response(self) -> web.Response:
        body = {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.status,
            }
        }
        return web.json_response(body, status=self.status)


@dataclass(frozen=True)
class ServedModel:
    names: tuple[str, ...]
    root: str
    max_model_len: int


@dataclass
class _Parsed:
    num_prompt_tokens: int
    prompt_token_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    model: str
    # What a prefill engine answers a remote decode with (engine_sim.handoff).
    kv_transfer_params: dict[str, Any] | None = None


class EngineSimServer:
    """The aiohttp application around one engine driver."""

    def __init__(
        self,
        config: EngineConfig,
        timer: StepTimer,
        served: ServedModel,
        time_scale: float,
        *,
        rates_in_engine_time: bool = False,
        histogram_buckets: Mapping[str, Sequence[float]] | None = None,
        work: StepWork | None = None,
        handoff: Handoff | None = None,
    ) -> None:
        self.served = served
        self.handoff = handoff
        self.metrics = EngineMetrics(
            served.names[0],
            config.max_model_len,
            time_scale if rates_in_engine_time else 1.0,
            histogram_buckets=histogram_buckets,
            work=work,
        )
        self.driver = EngineDriver(Engine(config, timer), self.metrics, ScaledClock(time_scale))
        self._ids = itertools.count()
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_post("/v1/chat/completions", self.chat_completions)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/metrics", self.metrics_page)
        self.app.router.add_get("/version", self.version)
        self.app.on_startup.append(self._on_startup)
        self.app.on_cleanup.append(self._on_cleanup)

    async def _on_startup(self, _app: web.Application) -> None:
        self.driver.start()

    async def _on_cleanup(self, _app: web.Application) -> None:
        await self.driver.stop()

    # ----- simple routes ------------------------------------------------------------------

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, _request: web.Request) -> web.Response:
        return web.json_response({"version": _VERSION})

    async def metrics_page(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.exposition(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def models(self, _request: web.Request) -> web.Response:
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": self.served.root,
                "parent": None,
                "max_model_len": self.served.max_model_len,
            }
            for name in self.served.names
        ]
        return web.json_response({"object": "list", "data": data})

    # ----- generation ---------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            parsed = self._parse(body, chat)
            produce, handed = await self._handoff(body, parsed)
            request_id = f"{'chatcmpl' if chat else 'cmpl'}-{next(self._ids):08x}"
            config = self.driver.engine.config
            sim_request = SimRequest(
                request_id,
                parsed.num_prompt_tokens,
                parsed.max_tokens,
                # What the prefix cache sees: the prompt's full blocks, hashed as vLLM does (a
                # prompt whose KV was handed over is not looked up).
                block_hashes=(
                    token_block_hashes(parsed.prompt_token_ids, config.block_size)
                    if config.enable_prefix_caching and not handed
                    else ()
                ),
                hash_block_tokens=config.block_size,
                num_handed_over_tokens=handed,
            )
            stream = self.driver.submit(sim_request, parsed.max_tokens)
            if handed:
                self.metrics.observe_handed_over(parsed.num_prompt_tokens, handed)
            if produce and self.handoff is not None:
                parsed.kv_transfer_params = self.handoff.produced(
                    request_id, parsed.num_prompt_tokens, config.block_size
                )
        except HandoffError as error:
            return ApiError(error.status, str(error), "kv_transfer_params").response()
        except ApiError as error:
            return error.response()
        except InvalidRequest as error:
            return ApiError(400, str(error)).response()
        except (TypeError, ValueError, AttributeError) as error:
            # A field of an unexpected JSON type that no check above names: still the
            # client's mistake, so a 400 rather than a 500 with a traceback.
            return ApiError(400, f"malformed request: {error}").response()
        try:
            if parsed.stream:
                return await self._stream(request, stream, parsed, chat)
            return await self._whole(stream, parsed, chat)
        except asyncio.CancelledError:
            # The client went away while we waited: free its sequence and KV blocks now
            # rather than finishing it for nobody.
            self.driver.abort(stream.request_id)
            raise

    async def _handoff(self, body: Mapping[str, Any], parsed: _Parsed) -> tuple[bool, int]:
        """This request's part in a hand-off: whether to answer with the KV's whereabouts (a
        prefill), and how many prompt tokens' KV it pulled first (a decode)."""
        params = body.get("kv_transfer_params")
        produce, consume = wanted(params)
        if not (produce or consume):
            return False, 0
        if self.handoff is None:
            raise HandoffError(
                400,
                "kv_transfer_params asks for a hand-off, but this engine has no "
                "--kv-transfer-config",
            )
        if produce and not self.handoff.produces():
            raise HandoffError(
                400, f"do_remote_decode asks a prefill of a {self.handoff.kv_role} engine"
            )
        if produce and parsed.stream:
            raise HandoffError(
                400, "a prefill for a remote decode is answered whole: set stream false"
            )
        if consume and not self.handoff.consumes():
            raise HandoffError(
                400, f"do_remote_prefill asks a decode of a {self.handoff.kv_role} engine"
            )
        if not consume:
            return True, 0
        handed = parsed.num_prompt_tokens - 1
        # The decode engine pulls the KV before it schedules the request.
        clock = self.driver.clock
        await asyncio.sleep(max(0.0, self.handoff.transfer_s(handed) / clock.time_scale))
        return False, handed

    def _parse(self, body: Mapping[str, Any], chat: bool) -> _Parsed:
        model = body.get("model") or self.served.names[0]
        if model not in self.served.names:
            raise ApiError(404, f"The model `{model}` is not served here; served: "
                           f"{', '.join(self.served.names)}", "model")  # fmt: skip
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise ApiError(400, "messages must be a non-empty list", "messages")
            if not all(isinstance(m, Mapping) for m in messages):
                raise ApiError(400, "each message must be an object with role and content")
            prompt_ids = chat_token_ids(messages)
        else:
            prompt_ids = _prompt_token_ids(body.get("prompt"))
        num_prompt = len(prompt_ids)
        n = body.get("n", 1)
        if n != 1:
            raise ApiError(400, "the engine simulator supports n=1 only", "n")
        max_len = self.served.max_model_len
        if num_prompt >= max_len:
            raise ApiError(
                400,
                f"the prompt has {num_prompt} tokens, which leaves no room for output within "
                f"this model's maximum context length of {max_len} tokens; shorten the prompt",
                "prompt" if not chat else "messages",
            )
        max_tokens = body.get("max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = max_len - num_prompt if chat else _COMPLETIONS_DEFAULT_MAX_TOKENS
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise ApiError(400, f"max_tokens must be an integer, got {max_tokens!r}", "max_tokens")
        if max_tokens < 1:
            raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}", "max_tokens")
        if num_prompt + max_tokens > max_len:
            raise ApiError(
                400,
                f"prompt ({num_prompt} tokens) plus max_tokens ({max_tokens}) exceeds this "
                f"model's maximum context length of {max_len} tokens; lower max_tokens",
                "max_tokens",
            )
        stream_options = body.get("stream_options") or {}
        if not isinstance(stream_options, Mapping):
            raise ApiError(400, "stream_options must be an object", "stream_options")
        return _Parsed(
            num_prompt_tokens=num_prompt,
            prompt_token_ids=prompt_ids,
            max_tokens=max_tokens,
            stream=bool(body.get("stream", False)),
            include_usage=bool(stream_options.get("include_usage", False)),
            model=str(model),
        )

    async def _whole(self, stream: RequestStream, parsed: _Parsed, chat: bool) -> web.Response:
        while stream.finished is None:
            await stream.changed.wait()
            stream.changed.clear()
        stats = stream.finished
        text = "".join(token_text(i) for i in range(stats.num_output_tokens))
        created = int(time.time())
        usage = _usage(stats.num_prompt_tokens, stats.num_output_tokens)
        if chat:
            body: dict[str, Any] = {
                "id": stream.request_id,
                "object": "chat.completion",
                "created": created,
                "model": parsed.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": None,
                        "finish_reason": stats.finish_reason,
                        "stop_reason": None,
                    }
                ],
                "usage": usage,
            }
        else:
            body = {
                "id": stream.request_id,
                "object": "text_completion",
                "created": created,
                "model": parsed.model,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": stats.finish_reason,
                        "stop_reason": None,
                    }
                ],
                "usage": usage,
            }
        if parsed.kv_transfer_params is not None:
            body["kv_transfer_params"] = parsed.kv_transfer_params
        return web.json_response(body)

    async def _stream(
        self, request: web.Request, stream: RequestStream, parsed: _Parsed, chat: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        chunks = _ChunkWriter(stream.request_id, parsed.model, chat)
        if chat:
            await response.write(chunks.role(stream.arrival_s))
        num_sent = 0
        while True:
            await stream.changed.wait()
            stream.changed.clear()
            stats = stream.finished
            num_ready = stats.num_output_tokens if stats is not None else stream.num_ready
            out = []
            times = stream.token_times_s
            for i in range(num_sent, num_ready):
                last = stats is not None and i == num_ready - 1
                reason = stats.finish_reason if last and stats else None
                arrival_s = stream.arrival_s if i == 0 and not chat else None
                out.append(chunks.token(i, reason, times[i], arrival_s))
            num_sent = num_ready
            if stats is not None:
                if parsed.include_usage:
                    out.append(chunks.usage(stats.num_prompt_tokens, stats.num_output_tokens))
                out.append(b"data: [DONE]\n\n")
            try:
                if out:
                    await response.write(b"".join(out))
                if stats is not None:
                    await response.write_eof()
            except ConnectionError:
                # The client closed the stream (a probe's cleanup, a cancelled request):
                # free the sequence; there is no one to answer.
                self.driver.abort(stream.request_id)
                return response
            if stats is not None:
                return response


class _ChunkWriter:
    """SSE chunks with the constant parts of the JSON encoded once per request.

    Every chunk also carries `engine_time_s`, the engine (virtual) time its token was made,
    and the first one `engine_arrival_s`, when the request reached the engine: extra fields
    OpenAI clients ignore, which let the interference probe read exact iteration times
    where arrival times on a busy host jitter by tens of milliseconds.
    """

    def __init__(self, request_id: str, model: str, chat: bool) -> None:
        self.created = int(time.time())
        self.request_id = request_id
        self.model = model
        self.chat = chat
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": request_id, "object": obj, "created": self.created, "model": model}
        self._head = json.dumps(head)[:-1]  # without the closing brace
        self._choice_cache: dict[str, str] = {}

    def role(self, arrival_s: float) -> bytes:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}  # fmt: skip
        extra = f', "engine_arrival_s": {arrival_s:.6f}'
        return self._event(json.dumps(choice), extra)

    def token(
        self, index: int, finish_reason: str | None, time_s: float, arrival_s: float | None
    ) -> bytes:
        text = token_text(index)
        if finish_reason is None:
            choice = self._choice_cache.get(text)
            if choice is None:
                choice = self._choice_cache[text] = json.dumps(self._choice(text, None))
        else:
            choice = json.dumps(self._choice(text, finish_reason))
        extra = f', "engine_time_s": {time_s:.6f}'
        if arrival_s is not None:
            extra += f', "engine_arrival_s": {arrival_s:.6f}'
        return self._event(choice, extra)

    def usage(self, num_prompt_tokens: int, num_output_tokens: int) -> bytes:
        usage = json.dumps({"usage": _usage(num_prompt_tokens, num_output_tokens)})
        return f'data: {self._head}, "choices": [], {usage[1:]}\n\n'.encode()

    def _choice(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        if self.chat:
            return {"index": 0, "delta": {"content": text}, "logprobs": None,
                    "finish_reason": finish_reason}  # fmt: skip
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                "stop_reason": None}  # fmt: skip

    def _event(self, choice_json: str, extra: str) -> bytes:
        return f'data: {self._head}, "choices": [{choice_json}]{extra}}}\n\n'.encode()


def _usage(num_prompt_tokens: int, num_output_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": num_prompt_tokens,
        "total_tokens": num_prompt_tokens + num_output_tokens,
        "completion_tokens": num_output_tokens,
    }


async def _json_body(request: web.Request) -> Mapping[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(400, f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, Mapping):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _prompt_token_ids(prompt: object) -> list[int]:
    """Prompt tokens: token ids as given, text through the tokenizer stand-in."""
    if isinstance(prompt, list) and len(prompt) == 1 and not isinstance(prompt[0], int):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError(400, "prompt must not be empty", "prompt")
        # Text of symbols only still makes one token, as a real tokenizer would.
        return text_token_ids(prompt) or [0]
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
    ):
        return list(prompt)
    raise ApiError(
        400,
        "prompt must be a non-empty string or a non-empty list of token ids (batches of more "
        "than one prompt are not supported by the engine simulator)",
        "prompt",
    )


async def serve(server: EngineSimServer, host: str, port: int) -> web.AppRunner:
    """Start listening; the caller keeps the runner and calls `cleanup()` to stop."""
    runner = web.AppRunner(server.app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    return runner


@contextlib.asynccontextmanager
async def running(
    config: EngineConfig,
    timer: StepTimer,
    served: ServedModel,
    time_scale: float = 1.0,
    host: str = "127.0.0.1",
    handoff: Handoff | None = None,
) -> AsyncIterator[tuple[EngineSimServer, str]]:
    """An engine-sim on a free loopback port for the duration of a block: (server, base URL).

    For tests and benchmarks that drive it over HTTP from the same process."""
    server = EngineSimServer(config, timer, served, time_scale, handoff=handoff)
    runner = await serve(server, host, 0)
    try:
        port = runner.addresses[0][1]
        yield server, f"http://{host}:{port}"
    finally:
        await runner.cleanup()
