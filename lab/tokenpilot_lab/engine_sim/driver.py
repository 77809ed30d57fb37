"""Run the engine model in (scaled) real time and hand each token to its request.

One task steps the engine: it asks the model for the next step, sleeps until that step's end
on the scaled wall clock, then delivers the step's tokens. When the engine falls behind (a
slow event loop) the next step still starts where the model says the last one ended, so the
token rate is the model's and the lag is made up rather than lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from tokenpilot_lab.engine_sim.metrics import EngineMetrics
from tokenpilot_lab.sim import Engine, RequestStats, SimRequest, StepResult

# Yield to the event loop at least this often when the engine runs behind the clock.
_MAX_STEPS_WITHOUT_YIELD = 8


class ScaledClock:
    """Engine seconds since start: wall seconds times `time_scale`."""

    def __init__(self, time_scale: float, monotonic: Callable[[], float] = time.monotonic):
        self.time_scale = time_scale
        self._monotonic = monotonic
        self._start = monotonic()

    def now_s(self) -> float:
        return (self._monotonic() - self._start) * self.time_scale

    def wall_delay_s(self, engine_s: float) -> float:
        """Wall seconds until engine time `engine_s` (negative if it has passed)."""
        return (engine_s - self.now_s()) / self.time_scale


class RequestStream:
    """A request's view of its tokens: how many are ready, and its stats once finished."""

    __slots__ = (
        "arrival_s",
        "changed",
        "finished",
        "last_token_s",
        "max_tokens",
        "num_prompt_tokens",
        "num_ready",
        "request_id",
        "token_times_s",
    )

    def __init__(self, request: SimRequest, arrival_s: float, max_tokens: int) -> None:
        self.request_id = request.request_id
        self.num_prompt_tokens = request.num_prompt_tokens
        self.max_tokens = max_tokens
        self.arrival_s = arrival_s
        self.num_ready = 0
        self.last_token_s = arrival_s
        # Engine time of each token, for the engine_time_s field of streamed chunks.
        self.token_times_s: list[float] = []
        self.finished: RequestStats | None = None
        self.changed = asyncio.Event()


class EngineDriver:
    """Owns the engine; submit and abort are safe from any handler on the same loop."""

    def __init__(self, engine: Engine, metrics: EngineMetrics, clock: ScaledClock) -> None:
        self.engine = engine
        self.metrics = metrics
        self.clock = clock
        self._streams: dict[str, RequestStream] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-sim")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def submit(self, request: SimRequest, max_tokens: int) -> RequestStream:
        """Queue a request now; raises the engine's InvalidRequest for one it cannot take."""
        now_s = self.clock.now_s()
        self.engine.submit(request, now_s)
        stream = RequestStream(request, now_s, max_tokens)
        self._streams[request.request_id] = stream
        self._set_gauges()
        self._wake.set()
        return stream

    def abort(self, request_id: str) -> None:
        """The client went away: free the sequence and its KV blocks."""
        if self._streams.pop(request_id, None) is not None and self.engine.abort(request_id):
            self.metrics.observe_aborted()
        self._set_gauges()

    async def _run(self) -> None:
        steps_since_yield = 0
        while True:
            result = self.engine.step()
            if result is None:
                self._set_gauges()
                self._wake.clear()
                await self._wake.wait()
                continue
            delay_s = self.clock.wall_delay_s(result.end_s)
            if delay_s > 0:
                await asyncio.sleep(delay_s)
                steps_since_yield = 0
            else:
                steps_since_yield += 1
                if steps_since_yield >= _MAX_STEPS_WITHOUT_YIELD:
                    await asyncio.sleep(0)
                    steps_since_yield = 0
            self._deliver(result)

    def _deliver(self, result: StepResult) -> None:
        streams = self._streams
        end_s = result.end_s
        itl_s: list[float] = []
        ttft_s: list[float] = []
        num_prompt_tokens_done = 0
        cached = dict(zip(result.first_token, result.first_token_cached_tokens, strict=True))
        num_cached_tokens_done = 0
        for request_id in result.emitted:
            stream = streams.get(request_id)
            if stream is None:
                continue  # aborted while its step ran
            if stream.num_ready == 0:
                ttft_s.append(end_s - stream.arrival_s)
                num_prompt_tokens_done += stream.num_prompt_tokens
                num_cached_tokens_done += cached.get(request_id, 0)
            else:
                itl_s.append(end_s - stream.last_token_s)
            stream.num_ready += 1
            stream.last_token_s = end_s
            stream.token_times_s.append(end_s)
            stream.changed.set()
        self.metrics.observe_step(
            result, itl_s, ttft_s, num_prompt_tokens_done, num_cached_tokens_done
        )
        for stats in result.finished:
            stream = streams.pop(stats.request_id, None)
            if stream is None:
                continue
            stream.finished = stats
            stream.changed.set()
            self.metrics.observe_finished(stats, stream.max_tokens)
        self._set_gauges()

    def _set_gauges(self) -> None:
        engine = self.engine
        self.metrics.set_gauges(engine.num_running, engine.num_waiting, engine.kv_cache_usage)
