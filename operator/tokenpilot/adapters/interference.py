"""The interference protocol against an OpenAI-compatible engine: how much a burst of prefills
slows the decode streams beside it. `tokenpilot calibrate` and the lab's `tokenpilot probe` both
measure through it.

The protocol of the interference study, against any OpenAI-compatible endpoint:
  1. PRIME     start `num_decode` streaming completions and wait until each has a token, then
               let them settle;
  2. BASELINE  watch the decode streams for `baseline_s`;
  3. INJECT    right after a decode token arrives, send `num_prefill` requests of
               `prefill_len` prompt tokens with max_tokens 1, and wait for all of them;
  4. RECOVERY  watch the decode streams for `recovery_s` more;
  5. CLEANUP   close the decode streams (the server frees their KV cache).

Every decode stream gets one token per engine iteration, so the gaps between a stream's
tokens are iteration times seen from outside. The analysis works per iteration: the k-th gap
of every stream in a window is the same engine iteration, so its duration is the median of
those gaps over the streams (one stalled stream or a late token cannot move it). Baseline is
the median of the last `LOCAL_BASELINE_ITERATIONS` iterations that ended before the burst
reached the engine: every decode's context grows by a token per iteration, so a baseline read
seconds earlier is stale by several percent. Mixed is the mean of the iterations that started
after the burst was sent, ended by the time its last request finished, and ran slower than
the baseline by more than a margin (all of them when none did); interference = mixed /
baseline - 1. Recovery counts the iterations after the burst until one is back within 10% of
the baseline.

Prompts are token ids (so their length is exact on any server) and differ per request, so a
prefix cache cannot make the burst free. `time_scale` divides every wait (for a simulator run
faster than real time) and multiplies every measured gap back into engine time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import httpx

RECOVERY_TOLERANCE = 0.10
# First line of a /metrics snapshot: when it was asked for (monotonic clock, seconds).
SNAPSHOT_TIME = "# snapshot_monotonic_s"
_EPS_S = 1e-6
_ENGINE_TIME = '"engine_time_s": '
_ENGINE_ARRIVAL = '"engine_arrival_s": '
_token_salts = itertools.count(1)


class ProbeError(RuntimeError):
    """The endpoint did not behave as the protocol needs (named step, what to check)."""


class UnmeasurableError(ProbeError):
    """The protocol ran, but a window held no step to time: the engine's steps (or the client's
    reading of them) varied more than the windows allow, as on a busy machine. Worth another
    attempt; the endpoint itself is not at fault."""


@dataclass(frozen=True)
class ProbeSettings:
    url: str
    num_decode: int = 32
    num_prefill: int = 4
    prefill_len: int = 2048
    # Short windows: the baseline needs only its last LOCAL_BASELINE_ITERATIONS iterations,
    # and every second the decodes run adds context (a token per iteration), which makes
    # each later burst read lower than the first.
    settle_s: float = 1.0
    baseline_s: float = 1.0
    recovery_s: float = 1.0
    time_scale: float = 1.0
    model: str | None = None
    decode_max_tokens: int = 4096
    # Context of each decode stream; the study's decodes had about 1-1.5K tokens of context.
    decode_prompt_len: int = 1024
    request_timeout_s: float = 120.0
    # Bursts per condition, each followed by a recovery; the median one is reported, so one
    # burst that met a stalled client or server does not decide the cell.
    num_bursts: int = 1
    # Read the engine's /metrics when the baseline starts, before the burst and after the
    # recovery (the engine's own timings, for an engine that does not stamp its chunks).
    snapshot_metrics: bool = False
    # Runs of the whole protocol, with fresh streams, when one found nothing to time (a stall
    # on a busy machine): one unlucky burst does not fail a grid of minutes, and three in a row
    # say the engine's timings are noise.
    attempts: int = 3


@dataclass
class ProbeResult:
    num_decode: int
    num_prefill: int
    prefill_len: int
    baseline_ms: float
    mixed_ms: float
    recovery_ms: float
    num_mixed_iterations: int
    recovery_iterations: int
    recovery_gaps_ms: list[float] = field(default_factory=list)
    # Mean context of the decode streams when the burst went out (prompt plus tokens so far):
    # a decode step grows with it, so the same burst reads less at a longer context.
    decode_context_tokens: int = 0
    # Whether the figures are the engine's own time stamps (else arrival times).
    engine_stamped: bool = False
    # /metrics texts by phase ("baseline", "burst", "after") with `snapshot_metrics`.
    metrics: dict[str, str] = field(default_factory=dict)

    @property
    def interference_pct(self) -> float:
        return (self.mixed_ms - self.baseline_ms) / self.baseline_ms * 100.0

    def describe(self) -> str:
        return (
            f"{self.num_decode} decodes (context {self.decode_context_tokens}), "
            f"{self.num_prefill} x {self.prefill_len} prefill: "
            f"baseline {self.baseline_ms:.1f} ms, mixed {self.mixed_ms:.1f} ms over "
            f"{self.num_mixed_iterations} iterations ({self.interference_pct:+.0f}%), "
            f"recovery {self.recovery_ms:.1f} ms, back within {RECOVERY_TOLERANCE:.0%} after "
            f"{self.recovery_iterations} iteration(s)"
        )


# ----- analysis (pure) ----------------------------------------------------------------------


Gap = tuple[float, float]  # (start, end) of one inter-token gap, in seconds

# Iterations the baseline averages. At 10-50 ms a step, 20 iterations are 0.2-1 s: long enough
# to average out arrival jitter, short enough that the decodes' growing context (one token per
# iteration) moves the step time by well under 1 % across them.
LOCAL_BASELINE_ITERATIONS = 20
# A mixed iteration runs slower than the baseline by more than this. A step that only finishes
# a burst's last few prompt tokens runs within about 1-2 % of decode speed (its compute hides
# under the decode's weight read), and the study's mixed times do not count it either.
SLOWED_MARGIN = 0.05
# Arrival times jitter, so from outside an iteration must stand out more to count as slowed.
SLOWED_MARGIN_ARRIVALS = 0.10
_RECOVERY_ITERATIONS = 20


def analyse(
    gaps_per_stream: Sequence[Sequence[Gap]],
    baseline_window: tuple[float, float],
    mixed_window: tuple[float, float],
    settings: ProbeSettings,
    seconds_per_unit: float = 1.0,
    slowed_margin: float = SLOWED_MARGIN,
) -> ProbeResult:
    """Interference from each decode stream's gaps.

    Baseline: the median of the last `LOCAL_BASELINE_ITERATIONS` iterations inside
    `baseline_window` (it should end where the burst reached the engine). Mixed: the
    iterations inside `mixed_window` slower than the baseline by more than `slowed_margin`.
    Recovery: the iterations after it. `seconds_per_unit` turns the gaps' time base into
    engine seconds (the time scale for wall-clock gaps, 1 for engine time stamps)."""
    lo, hi = baseline_window
    mixed_lo, mixed_hi = mixed_window
    before: list[list[float]] = []
    inside: list[list[float]] = []
    after: list[list[float]] = []
    for gaps in gaps_per_stream:
        before.append([b - a for a, b in gaps if lo <= a and b <= hi][-LOCAL_BASELINE_ITERATIONS:])
        inside.append([b - a for a, b in gaps if mixed_lo <= a and b <= mixed_hi])
        after.append([b - a for a, b in gaps if a >= mixed_hi - _EPS_S][:_RECOVERY_ITERATIONS])
    baseline_iterations = per_iteration(before, align_end=True)
    window_iterations = per_iteration(inside)
    if not baseline_iterations:
        raise UnmeasurableError(
            "no decode tokens arrived during the baseline window; is it streaming?"
        )
    if not window_iterations:
        raise UnmeasurableError(
            "no decode iteration fell inside the burst; the burst was too short"
        )
    scale_ms = 1000.0 * seconds_per_unit
    # The median: a recovery iteration of the burst before (or a stall) does not move it.
    baseline = statistics.median(baseline_iterations)
    mixed = [d for d in window_iterations if d > baseline * (1 + slowed_margin)]
    mixed = mixed or window_iterations
    baseline_ms = baseline * scale_ms
    recovery_gaps_ms = [d * scale_ms for d in per_iteration(after)]
    recovery_iterations = next(
        (
            i + 1
            for i, gap in enumerate(recovery_gaps_ms)
            if gap <= baseline_ms * (1 + RECOVERY_TOLERANCE)
        ),
        len(recovery_gaps_ms) + 1,
    )
    return ProbeResult(
        num_decode=settings.num_decode,
        num_prefill=settings.num_prefill,
        prefill_len=settings.prefill_len,
        baseline_ms=baseline_ms,
        mixed_ms=statistics.fmean(mixed) * scale_ms,
        recovery_ms=statistics.fmean(recovery_gaps_ms) if recovery_gaps_ms else float("nan"),
        num_mixed_iterations=len(mixed),
        recovery_iterations=recovery_iterations,
        recovery_gaps_ms=recovery_gaps_ms[:5],
    )


def per_iteration(
    gaps_per_stream: Sequence[Sequence[float]], align_end: bool = False
) -> list[float]:
    """The duration of each iteration: the median over the streams of their k-th gap (counted
    from the end with `align_end`). An index that fewer than half the streams reach is left
    out, so one stream with an extra gap at a window's edge adds no iteration."""
    streams = [list(reversed(g)) if align_end else list(g) for g in gaps_per_stream if g]
    if not streams:
        return []
    out = []
    for i in range(max(len(g) for g in streams)):
        column = [g[i] for g in streams if len(g) > i]
        if 2 * len(column) < len(streams):
            break
        out.append(statistics.median(column))
    return out[::-1] if align_end else out


def analyse_burst(
    streams: Sequence[_TokenTimes],
    baseline_start: float,
    burst: _BurstTimes,
    settings: ProbeSettings,
) -> ProbeResult:
    """One burst, in engine time when the server stamps it, else in arrival time. The
    baseline runs from `baseline_start` (monotonic clock) to the burst."""
    result = _analyse_burst(streams, baseline_start, burst, settings)
    tokens_before = [sum(1 for a in s.arrival if a <= burst.sent) for s in streams]
    context = settings.decode_prompt_len + statistics.fmean(tokens_before)
    stamped = burst.engine_arrival_s is not None and all(s.engine for s in streams)
    return replace(result, decode_context_tokens=round(context), engine_stamped=stamped)


def _analyse_burst(
    streams: Sequence[_TokenTimes],
    baseline_start: float,
    burst: _BurstTimes,
    settings: ProbeSettings,
) -> ProbeResult:
    if burst.engine_arrival_s is not None and all(s.engine for s in streams):
        # Engine time: the window runs from the burst's arrival at the engine to its last
        # token; the baseline from the first token stamped after `baseline_start` to it.
        gaps = [list(itertools.pairwise(s.engine)) for s in streams]
        starts = [
            e
            for s in streams
            for c, e in zip(s.arrival, s.engine, strict=False)
            if c >= baseline_start
        ]
        if not starts:
            raise UnmeasurableError("no decode tokens arrived during the baseline window")
        assert burst.engine_done_s is not None
        mixed = (burst.engine_arrival_s, burst.engine_done_s + _EPS_S)
        return analyse(gaps, (min(starts), burst.engine_arrival_s), mixed, settings)
    gaps = [list(itertools.pairwise(s.arrival)) for s in streams]
    typical = statistics.median(b - a for g in gaps for a, b in g[-50:]) if gaps else 0.0
    # The burst goes out just after a decode token: the gaps that start with that step's
    # tokens are the first that can carry it (on a slow engine the burst can fit inside one
    # of them, and a window starting at the send would then hold no gap at all). A token that
    # lands within half a typical gap of the burst's end came with it.
    released = max((a for s in streams for a in s.arrival if a <= burst.sent), default=burst.sent)
    mixed = (released - typical / 2, burst.done + typical / 2)
    return analyse(
        gaps,
        (baseline_start, released),
        mixed,
        settings,
        settings.time_scale,
        SLOWED_MARGIN_ARRIVALS,
    )


# ----- the protocol (I/O) -------------------------------------------------------------------


@dataclass
class _TokenTimes:
    """When each token arrived (monotonic clock) and, if the server stamps it, when the
    engine made it (engine clock)."""

    arrival: list[float] = field(default_factory=list)
    engine: list[float] = field(default_factory=list)


@dataclass
class _BurstTimes:
    sent: float
    done: float
    engine_arrival_s: float | None
    engine_done_s: float | None
    engine_last_arrival_s: float | None = None


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


class _DecodeStream(_TokenTimes):
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
    limits = httpx.Limits(max_connections=settings.num_decode + settings.num_prefill + 8)
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
        bursts: list[_BurstTimes] = []
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
        except httpx.RemoteProtocolError:
            # A pooled connection the server closed as idle just as it was reused: a GET is
            # safe to send again, on a new connection.
            if attempt:
                raise
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
) -> _BurstTimes:
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
    return _BurstTimes(
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


def _straddles_a_step(burst: _BurstTimes, decode_stamps: Sequence[float]) -> bool:
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


def format_heatmap(
    results: Sequence[ProbeResult], measured: dict[tuple[int, int], str] | None = None
) -> str:
    """Rows of num_prefill, columns of prefill_len; measured figures beside when given."""
    lens = sorted({r.prefill_len for r in results})
    rows = sorted({r.num_prefill for r in results})
    by_cell = {(r.num_prefill, r.prefill_len): r for r in results}
    width = 16 if measured else 8
    lines = ["num_prefill \\ len " + "".join(f"{n:>{width}}" for n in lens)]
    for row in rows:
        cells = []
        for n in lens:
            result = by_cell.get((row, n))
            text = f"{result.interference_pct:+.0f}%" if result else "-"
            if measured is not None:
                text = f"{text} ({measured.get((row, n), '?')})"
            cells.append(f"{text:>{width}}")
        lines.append(f"{row:>17} " + "".join(cells))
    return "\n".join(lines)
