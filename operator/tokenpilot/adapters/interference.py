"""The interference protocol against an OpenAI-compatible engine (core.interference has the
protocol and its analysis): `tokenpilot calibrate` and the lab's `tokenpilot probe` both measure
through it.

Prompts are token ids (so their length is exact on any server) and differ per request, so a
prefix cache cannot make the burst free. `time_scale` divides every wait (an engine whose clock
runs faster than real time). Where a server stamps each streamed chunk with its engine's own
clock (`engine_time_s`, and on a request's first chunk `engine_arrival_s`), the analysis reads
those instead of arrival times.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import replace

import httpx

from tokenpilot.core.interference import (
    BurstTimes,
    ProbeError,
    ProbeResult,
    ProbeSettings,
    TokenTimes,
    UnmeasurableError,
    analyse_burst,
)

# First line of a /metrics snapshot: when it was asked for (monotonic clock, seconds).
SNAPSHOT_TIME = "# snapshot_monotonic_s"
# uvicorn, which serves vLLM's API, closes a connection idle for 5 s (its default keep-alive);
# httpx's default keeps one for 5 s too, so a request could go out on a connection the server
# was closing at that instant. Giving idle connections up sooner leaves that to a stalled server.
KEEPALIVE_S = 2.0
_ENGINE_TIME = '"engine_time_s": '
_ENGINE_ARRIVAL = '"engine_arrival_s": '
_token_salts = itertools.count(1)


def _stamp(line: str, key: str) -> float | None:
    """A numeric field of an SSE JSON line, found without parsing the whole line."""
    at = line.find(key)
    if at < 0:
        return None
    start = at + len(key)
    end = start
    while end < len(line) and line[end] not in ",}":
        end += 1
    try:
        return float(line[start:end])
    except ValueError:
        return None


class _DecodeStream(TokenTimes):
    def __init__(self, tick: asyncio.Event) -> None:
        super().__init__()
        self.first = asyncio.Event()
        # Shared by all streams: set by whichever sees a new iteration's token first.
        self.tick = tick
        self.error: BaseException | None = None


async def run_probe(
    settings: ProbeSettings, client: httpx.AsyncClient | None = None
) -> ProbeResult:
    """One probe condition; returns its result or raises ProbeError."""
    own_client = client is None
    if client is None:
        client = _client(settings)
    try:
        model = settings.model or await discover_model(client, settings.url)
        return await _attempts(settings, client, model)
    finally:
        if own_client:
            await client.aclose()


async def run_heatmap(
    base: ProbeSettings, num_prefills: Sequence[int], prefill_lens: Sequence[int]
) -> list[ProbeResult]:
    """One probe per (num_prefill, prefill_len) cell, row by row."""
    results = []
    async with _client(base) as client:
        model = base.model or await discover_model(client, base.url)
        for num_prefill in num_prefills:
            for prefill_len in prefill_lens:
                cell = ProbeSettings(
                    **{**base.__dict__, "num_prefill": num_prefill, "prefill_len": prefill_len}
                )
                results.append(await _attempts(cell, client, model))
    return results


async def _attempts(settings: ProbeSettings, client: httpx.AsyncClient, model: str) -> ProbeResult:
    for attempt in range(1, settings.attempts + 1):
        try:
            return await _run(settings, client, model)
        except UnmeasurableError as error:
            if attempt == settings.attempts:
                raise UnmeasurableError(f"{error} (in {attempt} attempts)") from None
    raise ProbeError(f"attempts must be at least 1, not {settings.attempts}")


def _client(settings: ProbeSettings) -> httpx.AsyncClient:
    limits = httpx.Limits(
        max_connections=settings.num_decode + settings.num_prefill + 8,
        keepalive_expiry=KEEPALIVE_S,
    )
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(settings.request_timeout_s))


async def discover_model(client: httpx.AsyncClient, url: str) -> str:
    try:
        response = await client.get(f"{url}/v1/models")
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as error:
        raise ProbeError(
            f"cannot list models at {url}/v1/models ({error}); check --url or pass --model"
        ) from None


def _prompt(length: int) -> list[int]:
    """Token ids, distinct per request from the first two tokens (so a prefix cache cannot
    share them), all below 210 so that any vocabulary has them."""
    salt = next(_token_salts)
    head = [10 + salt % 200, 10 + (salt // 200) % 200]
    return (head + [10 + (salt + i * 31) % 200 for i in range(length)])[:length]


async def _decode(
    client: httpx.AsyncClient, url: str, model: str, settings: ProbeSettings, stream: _DecodeStream
) -> None:
    body = {
        "model": model,
        "prompt": _prompt(settings.decode_prompt_len),
        "max_tokens": settings.decode_max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                raise ProbeError(f"decode stream refused: {response.status_code} {response.text}")
            async for line in response.aiter_lines():
                # One SSE event per token (the closing [DONE] is not JSON).
                if line.startswith("data: {"):
                    stream.arrival.append(time.monotonic())
                    stamp = _stamp(line, _ENGINE_TIME)
                    if stamp is not None:
                        stream.engine.append(stamp)
                    stream.first.set()
                    stream.tick.set()
    except (httpx.HTTPError, ProbeError) as error:
        stream.error = error
        stream.first.set()


def _prefill_body(model: str, length: int) -> bytes:
    body = {
        "model": model,
        "prompt": _prompt(length),
        "max_tokens": 1,
        "ignore_eos": True,
        # Streamed, so its one token comes back the way the decode tokens do.
        "stream": True,
    }
    return json.dumps(body).encode()


class _Burst:
    """The burst's requests, written to already-open connections back to back.

    Plain HTTP/1.1 on asyncio streams rather than an HTTP client: a client library spends
    about a millisecond per request, which would spread a 16-request burst over more than
    one engine iteration. The bodies are encoded before the burst; sending is one write each.
    """

    def __init__(self, url: str, bodies: Sequence[bytes]) -> None:
        parsed = httpx.URL(url)
        if parsed.scheme != "http":
            raise ProbeError(f"the burst needs a plain http:// URL, got {url}")
        self.host = parsed.host
        self.port = parsed.port or 80
        path = (parsed.path.rstrip("/") or "") + "/v1/completions"
        self.requests = [
            (
                f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            + body
            for body in bodies
        ]
        self.connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def connect(self) -> None:
        self.connections = [
            await asyncio.open_connection(self.host, self.port) for _ in self.requests
        ]

    def send(self) -> None:
        for (_, writer), request in zip(self.connections, self.requests, strict=True):
            writer.write(request)

    async def wait(self) -> list[tuple[float, float | None, float | None]]:
        """Per request: when its token arrived, and the engine's stamps if it gives them."""
        return list(await asyncio.gather(*(_first_token(r) for r, _ in self.connections)))

    async def close(self) -> None:
        for _, writer in self.connections:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def _first_token(reader: asyncio.StreamReader) -> tuple[float, float | None, float | None]:
    seen = b""
    while True:
        data = await reader.read(65536)
        if not data:
            status = seen.split(b"\r\n", 1)[0].decode(errors="replace")
            raise ProbeError(
                f"a prefill request ended without a token ({status}); is --prefill-len within "
                "the server's max model length?"
            )
        arrived = time.monotonic()
        seen += data
        at = seen.find(b"data: {")
        if at >= 0 and seen.find(b"\n", at) >= 0:
            line = seen[at : seen.find(b"\n", at)].decode(errors="replace")
            return arrived, _stamp(line, _ENGINE_TIME), _stamp(line, _ENGINE_ARRIVAL)


async def _run(settings: ProbeSettings, client: httpx.AsyncClient, model: str) -> ProbeResult:
    scale = settings.time_scale
    url = settings.url.rstrip("/")
    tick = asyncio.Event()
    snapshots: dict[str, str] = {}
    streams = [_DecodeStream(tick) for _ in range(settings.num_decode)]
    tasks = [asyncio.create_task(_decode(client, url, model, settings, s)) for s in streams]
    try:
        # 1. PRIME
        await _bounded(
            asyncio.gather(*(s.first.wait() for s in streams)),
            settings.request_timeout_s,
            "waiting for every decode stream's first token",
        )
        for s in streams:
            if s.error is not None:
                raise ProbeError(f"a decode stream failed while priming: {s.error}")
        await asyncio.sleep(settings.settle_s / scale)
        # 2. BASELINE
        await _snapshot(client, url, settings, snapshots, "baseline")
        baseline_start = time.monotonic()
        await asyncio.sleep(settings.baseline_s / scale)
        bursts: list[BurstTimes] = []
        attempts = 0
        while len(bursts) < settings.num_bursts:
            attempts += 1
            await _snapshot(client, url, settings, snapshots, "burst")
            burst = await _inject(settings, url, model, tick, tasks, streams)
            # 4. RECOVERY
            await asyncio.sleep(settings.recovery_s / scale)
            await _snapshot(client, url, settings, snapshots, "after")
            if _straddles_a_step(burst, streams[0].engine) and attempts < 3 * settings.num_bursts:
                continue  # its requests reached the engine in different steps: send it again
            bursts.append(burst)
    finally:
        # 5. CLEANUP: closing the streams aborts them on the server.
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    for s in streams:
        if s.error is not None:
            raise ProbeError(f"a decode stream failed during the probe: {s.error}")
        if len(s.arrival) >= settings.decode_max_tokens:
            raise ProbeError("a decode stream ran out of tokens; raise decode_max_tokens")
    # Each burst's baseline starts once the one before it is done (its recovery window).
    since = [baseline_start] + [b.done for b in bursts[:-1]]
    results = [
        analyse_burst(streams, start, burst, settings)
        for start, burst in zip(since, bursts, strict=True)
    ]
    results.sort(key=lambda r: r.interference_pct)
    return replace(results[len(results) // 2], metrics=snapshots)


async def _snapshot(
    client: httpx.AsyncClient, url: str, settings: ProbeSettings, into: dict[str, str], phase: str
) -> None:
    if not settings.snapshot_metrics:
        return
    for attempt in range(2):
        taken = time.monotonic()
        try:
            response = await client.get(f"{url}/metrics")
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
            # A pooled connection the server closed as idle just as it was reused (it shows
            # as a protocol error, or as a reset when the close races the request): a GET is
            # safe to send again, and httpx sends it on a new connection.
            if attempt:
                raise ProbeError(
                    f"lost the connection to {url}/metrics twice {phase} a grid point "
                    f"({type(error).__name__}); is the engine still serving?"
                ) from None
            continue
        into[phase] = f"{SNAPSHOT_TIME} {taken}\n{response.text}"
        return


async def _inject(
    settings: ProbeSettings,
    url: str,
    model: str,
    tick: asyncio.Event,
    decodes: Sequence[asyncio.Task[None]],
    streams: Sequence[_DecodeStream],
) -> BurstTimes:
    """3. INJECT, just after a decode token so the burst lands early in an iteration."""
    burst = _Burst(
        url, [_prefill_body(model, settings.prefill_len) for _ in range(settings.num_prefill)]
    )
    await burst.connect()
    tick.clear()
    await _next_decode_token(tick, decodes, streams, settings.request_timeout_s)
    sent = time.monotonic()
    burst.send()
    firsts = await _bounded(burst.wait(), settings.request_timeout_s, "the prefill burst")
    await burst.close()
    arrivals = [a for _, _, a in firsts if a is not None]
    stamps = [e for _, e, _ in firsts if e is not None]
    stamped = len(arrivals) == len(stamps) == len(firsts)
    return BurstTimes(
        sent=sent,
        done=max(t for t, _, _ in firsts),
        engine_arrival_s=min(arrivals) if stamped else None,
        engine_done_s=max(stamps) if stamped else None,
        engine_last_arrival_s=max(arrivals) if stamped else None,
    )


async def _next_decode_token(
    tick: asyncio.Event,
    decodes: Sequence[asyncio.Task[None]],
    streams: Sequence[_DecodeStream],
    timeout_s: float,
) -> None:
    """Wait for the next decode token; a decode stream that has ended will send none, so say
    so at once instead of waiting out the timeout."""
    waiter = asyncio.ensure_future(tick.wait())
    try:
        done, _ = await asyncio.wait(
            {waiter, *decodes}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiter.cancel()
    if waiter in done:
        return
    if done:
        failed = next((s.error for s in streams if s.error is not None), None)
        if failed is not None:
            raise ProbeError(f"a decode stream failed before the burst was sent: {failed!r}")
        longest = max(streams, key=lambda s: len(s.arrival))
        lived_s = longest.arrival[-1] - longest.arrival[0] if longest.arrival else 0.0
        raise UnmeasurableError(
            "a decode stream ended before the burst was sent (after "
            f"{len(longest.arrival)} tokens over {lived_s:.1f} s): raise decode_max_tokens or "
            "shorten settle_s, baseline_s and recovery_s"
        )
    raise ProbeError(f"timed out after {timeout_s:.0f} s waiting for a decode token")


def _straddles_a_step(burst: BurstTimes, decode_stamps: Sequence[float]) -> bool:
    """Whether the burst's requests reached the engine on both sides of a step start (which
    only engine stamps can tell): then it is not the burst the condition asks for."""
    if burst.engine_arrival_s is None or burst.engine_last_arrival_s is None:
        return False
    first_start = next((t for t in decode_stamps if t >= burst.engine_arrival_s), None)
    return first_start is not None and burst.engine_last_arrival_s > first_start


async def _bounded(awaitable, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the result when it is
    # cancelled just as the awaitable finishes, losing the cancel (Ctrl-C then carried on).
    try:
        async with asyncio.timeout(timeout_s):
            return await awaitable
    except TimeoutError:
        raise ProbeError(f"timed out after {timeout_s:.0f} s {what}") from None
