"""An open-loop load generator for OpenAI-compatible engines on loopback addresses.

A plan is a list of phases (a quiet period, a burst, a cool-down, ...), each with a Poisson
arrival rate, a prompt length and an output length. Requests are streamed completions sent
to the endpoint with the fewest requests outstanding; for each one the generator records when
it was sent, its time to first token and every gap between tokens as the client saw them.

Open loop on purpose: arrivals do not wait for answers, so an overloaded engine shows up as a
growing queue and longer latencies, as it would for real users. Everything is bounded: the
plan's total duration, a cap on requests sent and on requests in flight (arrivals beyond it
are counted as refused, never queued in the client), a timeout per request, and a drain
timeout after the last phase after which stragglers are cancelled.

Only loopback endpoints are accepted (127.0.0.0/8, ::1, localhost): this is a tool for the
dev cluster and local engines, not for load-testing someone else's server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

# Token ids for prompts: any small ids are valid for every tokenizer, and a list of ids makes
# the prompt length exact (the engine does not tokenize it).
_PROMPT_TOKEN_ID = 1000


# How arrivals are spaced within a phase (LoadPlan.arrivals).
ARRIVALS = ("poisson", "even")


class LoadError(ValueError):
    """A plan or endpoint the generator refuses; the message names the setting and the fix."""


@dataclass(frozen=True, slots=True)
class LoadPhase:
    """`duration_s` of Poisson arrivals at `rate_per_s`, each `num_prompt_tokens` in and
    `max_tokens` out."""

    name: str
    duration_s: float
    rate_per_s: float
    num_prompt_tokens: int = 256
    max_tokens: int = 128

    def check(self) -> None:
        where = f"phase {self.name!r}"
        if not self.duration_s > 0 or not math.isfinite(self.duration_s):
            raise LoadError(f"{where}: duration must be a positive number of seconds")
        if not self.rate_per_s >= 0 or not math.isfinite(self.rate_per_s):
            raise LoadError(f"{where}: rate must be >= 0 requests per second")
        if self.num_prompt_tokens < 1:
            raise LoadError(f"{where}: prompt tokens must be >= 1")
        if self.max_tokens < 1:
            raise LoadError(f"{where}: max tokens must be >= 1")


@dataclass(frozen=True, slots=True)
class LoadPlan:
    phases: tuple[LoadPhase, ...]
    model: str | None = None  # None: the engine's first served model
    max_requests: int = 10_000
    max_in_flight: int = 512
    request_timeout_s: float = 120.0
    drain_timeout_s: float = 30.0
    seed: int = 0
    # Arrivals: "poisson" (exponential gaps from `seed`) or "even" (one every 1 / rate, the
    # first half a gap in): the same mean, with none of a Poisson stream's clusters.
    arrivals: str = "poisson"
    # Whether each prompt opens with its own tokens, so no two share a prefix-cache block and
    # every prompt token is prefilled (False: the same prompt each time, served from the cache).
    distinct_prompts: bool = False

    def check(self) -> None:
        if not self.phases:
            raise LoadError("the load plan has no phases; give at least one (rate and duration)")
        for phase in self.phases:
            phase.check()
        if self.max_requests < 1:
            raise LoadError("max requests must be >= 1")
        if self.max_in_flight < 1:
            raise LoadError("max in flight must be >= 1")
        if not self.request_timeout_s > 0 or not self.drain_timeout_s >= 0:
            raise LoadError("request timeout must be > 0 and drain timeout >= 0 seconds")
        if self.arrivals not in ARRIVALS:
            raise LoadError(f"arrivals {self.arrivals!r}: give one of {', '.join(ARRIVALS)}")

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    def phase_at(self, t_s: float) -> LoadPhase | None:
        """The phase running `t_s` seconds after the start, or None after the last."""
        end_s = 0.0
        for phase in self.phases:
            end_s += phase.duration_s
            if t_s < end_s:
                return phase
        return None

    def phase_start_s(self, name: str) -> float:
        start_s = 0.0
        for phase in self.phases:
            if phase.name == name:
                return start_s
            start_s += phase.duration_s
        raise KeyError(name)


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it; times in seconds since the run started."""

    phase: str
    endpoint: str
    sent_at_s: float
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    num_output_tokens: int = 0
    finished_at_s: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.finished_at_s is not None


@dataclass
class LoadResult:
    plan: LoadPlan
    records: list[RequestRecord]
    num_refused: int  # arrivals dropped because max_in_flight requests were outstanding
    num_cut: int  # arrivals not sent because max_requests was reached
    elapsed_s: float

    def by_phase(self, name: str) -> list[RequestRecord]:
        return [r for r in self.records if r.phase == name]


def check_loopback(url: str) -> str:
    """`url` without a trailing slash if its host is a loopback address; LoadError if not."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadError(f"endpoint {url!r} is not an http(s) URL; e.g. http://127.0.0.1:8000")
    host = parts.hostname
    loopback = host == "localhost"
    with contextlib.suppress(ValueError):
        loopback = loopback or ipaddress.ip_address(host).is_loopback
    if not loopback:
        raise LoadError(
            f"endpoint {url!r} is not on a loopback address; the load generator only drives "
            "local engines (127.0.0.0/8, ::1 or localhost)"
        )
    return url.rstrip("/")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


class Balancer:
    """Least outstanding requests over a set of endpoints that may change during the run.

    Ties go to the endpoint used least recently, so an idle fleet is used round-robin.
    """

    def __init__(self, endpoints: Iterable[str] = ()) -> None:
        self._outstanding: dict[str, int] = {}
        self._last_used: dict[str, int] = {}
        self._ticks = 0
        self.set_endpoints(endpoints)

    def set_endpoints(self, endpoints: Iterable[str]) -> None:
        wanted = [check_loopback(e) for e in endpoints]
        self._outstanding = {e: self._outstanding.get(e, 0) for e in wanted}

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(self._outstanding)

    def outstanding(self) -> dict[str, int]:
        return dict(self._outstanding)

    def acquire(self) -> str | None:
        if not self._outstanding:
            return None
        chosen = min(
            self._outstanding, key=lambda e: (self._outstanding[e], self._last_used.get(e, -1))
        )
        self._outstanding[chosen] += 1
        self._ticks += 1
        self._last_used[chosen] = self._ticks
        return chosen

    def release(self, endpoint: str) -> None:
        # An endpoint removed while the request ran is simply no longer counted.
        if endpoint in self._outstanding:
            self._outstanding[endpoint] = max(0, self._outstanding[endpoint] - 1)


class LoadGenerator:
    """Runs a plan against a balancer's endpoints; `records` grows while it runs."""

    def __init__(
        self,
        plan: LoadPlan,
        balancer: Balancer,
        *,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        plan.check()
        self.plan = plan
        self.balancer = balancer
        self.records: list[RequestRecord] = []
        self.num_refused = 0
        self.num_cut = 0
        self._clock = clock
        self._transport = transport
        self._in_flight: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self.started_at: float | None = None
        self._num_prompts = 0

    def elapsed_s(self) -> float:
        return 0.0 if self.started_at is None else self._clock() - self.started_at

    @property
    def num_in_flight(self) -> int:
        return len(self._in_flight)

    def stop(self) -> None:
        """End the arrivals now; requests in flight get the drain timeout to finish."""
        self._stop.set()

    async def _sleep(self, delay_s: float) -> bool:
        """Sleep `delay_s`; False if stop() was called meanwhile."""
        if delay_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay_s)
        return not self._stop.is_set()

    async def run(self) -> LoadResult:
        plan = self.plan
        rng = random.Random(plan.seed)
        limits = httpx.Limits(max_connections=plan.max_in_flight, max_keepalive_connections=64)
        timeout = httpx.Timeout(plan.request_timeout_s, connect=5.0)
        async with httpx.AsyncClient(
            limits=limits, timeout=timeout, transport=self._transport, trust_env=False
        ) as client:
            self.started_at = self._clock()
            try:
                await self._arrivals(client, rng)
                await self._drain()
            finally:
                for task in list(self._in_flight):
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.gather(*self._in_flight, return_exceptions=True)
        return LoadResult(plan, self.records, self.num_refused, self.num_cut, self.elapsed_s())

    async def _arrivals(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        # Poisson arrivals per phase; a phase starts its own process at its start (memoryless,
        # so no gap from the previous phase's rate spills over into it).
        plan = self.plan
        num_sent = 0
        start_s = 0.0
        for phase in plan.phases:
            end_s = start_s + phase.duration_s
            next_s = start_s + (self._gap(rng, phase, first=True) if phase.rate_per_s else end_s)
            while next_s < end_s:
                if not await self._sleep(next_s - self.elapsed_s()):
                    return
                if num_sent >= plan.max_requests:
                    self.num_cut += 1
                elif len(self._in_flight) >= plan.max_in_flight:
                    self.num_refused += 1
                else:
                    num_sent += 1
                    self._start(client, phase)
                next_s += self._gap(rng, phase, first=False)
            start_s = end_s
        # Arrivals end with the plan, not with the last arrival.
        await self._sleep(start_s - self.elapsed_s())

    def _gap(self, rng: random.Random, phase: LoadPhase, *, first: bool) -> float:
        if self.plan.arrivals == "even":
            return (0.5 if first else 1.0) / phase.rate_per_s
        return rng.expovariate(phase.rate_per_s)

    async def _drain(self) -> None:
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=self.plan.drain_timeout_s)
        for record in self.records:
            if record.finished_at_s is None and record.error is None:
                record.error = "cancelled: still running at the end of the drain timeout"

    def _start(self, client: httpx.AsyncClient, phase: LoadPhase) -> None:
        record = RequestRecord(phase.name, "", self.elapsed_s())
        self.records.append(record)
        task = asyncio.get_running_loop().create_task(self._request(client, phase, record))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _request(
        self, client: httpx.AsyncClient, phase: LoadPhase, record: RequestRecord
    ) -> None:
        endpoint = self.balancer.acquire()
        if endpoint is None:
            record.error = "no endpoint to send to"
            return
        record.endpoint = endpoint
        body: dict[str, object] = {
            "prompt": self._prompt(phase.num_prompt_tokens),
            "max_tokens": phase.max_tokens,
            "stream": True,
            # Real vLLM: generate exactly max_tokens so every request weighs what the plan says.
            "ignore_eos": True,
        }
        if self.plan.model is not None:
            body["model"] = self.plan.model
        try:
            await self._stream(client, f"{endpoint}/v1/completions", body, record)
        except httpx.TimeoutException:
            record.error = f"timed out after {self.plan.request_timeout_s:g} s"
        except httpx.HTTPError as error:
            record.error = f"{type(error).__name__}: {error}"
        except asyncio.CancelledError:
            record.error = "cancelled: still running at the end of the drain timeout"
            raise
        finally:
            self.balancer.release(endpoint)

    def _prompt(self, num_tokens: int) -> list[int]:
        if not self.plan.distinct_prompts:
            return [_PROMPT_TOKEN_ID] * num_tokens
        # The request's number in base 1,000 as its first tokens (ids 1,001 to 2,000).
        self._num_prompts += 1
        head: list[int] = []
        n = self._num_prompts
        while n and len(head) < num_tokens:
            head.append(_PROMPT_TOKEN_ID + 1 + n % 1000)
            n //= 1000
        return head + [_PROMPT_TOKEN_ID] * (num_tokens - len(head))

    async def _stream(
        self, client: httpx.AsyncClient, url: str, body: dict[str, object], record: RequestRecord
    ) -> None:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")[:200]
                record.error = f"HTTP {response.status_code}: {text}"
                return
            last_s: float | None = None
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                if not _has_token(data):
                    continue
                now_s = self.elapsed_s()
                if last_s is None:
                    record.ttft_s = now_s - record.sent_at_s
                else:
                    record.itl_s.append(now_s - last_s)
                last_s = now_s
                record.num_output_tokens += 1
        record.finished_at_s = self.elapsed_s()


def _has_token(data: str) -> bool:
    """A chunk carrying generated text (not a usage-only or empty chunk)."""
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        return False
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    if not choices:
        return False
    text = choices[0].get("text")
    if text is None:
        text = (choices[0].get("delta") or {}).get("content")
    return bool(text)


async def run_plan(plan: LoadPlan, endpoints: Iterable[str]) -> LoadResult:
    """Run `plan` against a fixed set of endpoints."""
    balancer = Balancer(endpoints)
    if not balancer.endpoints:
        raise LoadError("no endpoints given; pass at least one --url")
    return await LoadGenerator(plan, balancer).run()


@dataclass(frozen=True)
class PhaseSummary:
    """Client-side figures of the requests *sent* in one phase (they may finish after it)."""

    name: str
    num_sent: int
    num_ok: int
    num_errors: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    output_tokens_per_s: float  # tokens those requests received, over the phase's duration


def summarize(result: LoadResult) -> list[PhaseSummary]:
    """Per-phase counts and client-side latency percentiles."""
    out = []
    for phase in result.plan.phases:
        records = result.by_phase(phase.name)
        ok = [r for r in records if r.ok]
        ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
        itls = [gap for r in ok for gap in r.itl_s]
        tokens = sum(r.num_output_tokens for r in records)
        out.append(
            PhaseSummary(
                name=phase.name,
                num_sent=len(records),
                num_ok=len(ok),
                num_errors=len(records) - len(ok),
                ttft_p50_s=percentile(ttfts, 0.5),
                ttft_p99_s=percentile(ttfts, 0.99),
                itl_p50_s=percentile(itls, 0.5),
                itl_p99_s=percentile(itls, 0.99),
                output_tokens_per_s=tokens / phase.duration_s,
            )
        )
    return out
