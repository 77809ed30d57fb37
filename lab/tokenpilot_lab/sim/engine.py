"""The engine: queues, KV blocks and virtual time around the scheduler.

Each step starts where the previous one ended (or at the first eligible arrival when idle),
lasts what the step timer says for its token mix, and samples one token for every sequence
whose computed tokens caught up with its tokens. Tokens carry the step's end time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import pairwise

from tokenpilot_lab.sim.config import EngineConfig
from tokenpilot_lab.sim.events import (
    EngineEvent,
    Finished,
    FirstToken,
    Preempted,
    RequestStats,
    StepLog,
)
from tokenpilot_lab.sim.kv_cache import BlockPool
from tokenpilot_lab.sim.request import InvalidRequest, Sequence, SimRequest
from tokenpilot_lab.sim.scheduler import schedule
from tokenpilot_lab.sim.timer import StepTimer

# Bulk decode is only worth its setup for a few steps or more.
_MIN_FAST_FORWARD_STEPS = 4


@dataclass(slots=True)
class StepResult:
    """One step as the server needs it: when it ran and who got a token."""

    start_s: float
    end_s: float
    num_prefill_tokens: int
    num_decode_tokens: int
    # Prefix-cache lookups of the sequences admitted this step, in tokens (vLLM's counters).
    num_prefix_cache_queries: int = 0
    num_prefix_cache_hits: int = 0
    # Request ids that received a token at end_s, in scheduling order.
    emitted: list[str] = field(default_factory=list)
    first_token: list[str] = field(default_factory=list)
    # Beside first_token: the prompt tokens each found in the prefix cache.
    first_token_cached_tokens: list[int] = field(default_factory=list)
    finished: list[RequestStats] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)


class Engine:
    """vLLM V1-style continuous batching on a virtual clock. See the package docstring."""

    def __init__(self, config: EngineConfig, timer: StepTimer) -> None:
        self.config = config
        self.timer = timer
        self.pool = BlockPool(config.num_kv_blocks, config.block_size, config.enable_prefix_caching)
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()
        self.step_log = StepLog()
        self.num_preemptions_total = 0
        # vLLM's prefix_cache_queries / prefix_cache_hits, in tokens.
        self.num_prefix_cache_queries_total = 0
        self.num_prefix_cache_hits_total = 0
        self._clock_s = 0.0
        self._last_arrival_s = float("-inf")
        self._ids: set[str] = set()

    # ----- inputs -------------------------------------------------------------------------

    def submit(self, request: SimRequest, now_s: float) -> None:
        """Queue `request`, arrived at `now_s`. Arrivals must come in time order."""
        if request.request_id in self._ids:
            raise InvalidRequest(f"request id {request.request_id!r} is already in the engine")
        if now_s < self._last_arrival_s:
            raise InvalidRequest(
                f"request {request.request_id} arrives at {now_s} s, before the previous "
                f"arrival at {self._last_arrival_s} s; submit arrivals in time order"
            )
        total = request.num_prompt_tokens + request.num_output_tokens
        if total > self.config.max_model_len:
            raise InvalidRequest(
                f"request {request.request_id}: prompt ({request.num_prompt_tokens}) plus "
                f"output ({request.num_output_tokens}) tokens exceed max_model_len "
                f"({self.config.max_model_len})"
            )
        blocks_per_hash, rest = divmod(request.hash_block_tokens, self.config.block_size)
        if request.block_hashes and (rest or not blocks_per_hash):
            raise InvalidRequest(
                f"request {request.request_id}: its prompt hashes cover "
                f"{request.hash_block_tokens} tokens each, not a multiple of the KV block "
                f"size ({self.config.block_size}); hash the prompt in whole blocks"
            )
        if request.num_handed_over_tokens and request.block_hashes:
            raise InvalidRequest(
                f"request {request.request_id}: a hand-off's prompt is not looked up in the "
                "prefix cache; give it no block hashes"
            )
        if self.idle:
            self._clock_s = max(self._clock_s, now_s)
        self._last_arrival_s = now_s
        self._ids.add(request.request_id)
        seq = Sequence(request, now_s, self.config.record_itl, blocks_per_hash)
        self.waiting.append(seq)

    def abort(self, request_id: str) -> bool:
        """Drop a request (client went away) and free its blocks; False if unknown."""
        if request_id not in self._ids:
            return False
        self._ids.discard(request_id)
        for queue in (self.running, self.waiting):
            for seq in queue:
                if seq.request_id == request_id:
                    queue.remove(seq)
                    self.pool.free(seq)
                    return True
        return False

    # ----- gauges -------------------------------------------------------------------------

    @property
    def now_s(self) -> float:
        """When the engine is next free to start a step."""
        return self._clock_s

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_cache_usage(self) -> float:
        return self.pool.usage

    def drain_step_log(self) -> StepLog:
        log, self.step_log = self.step_log, StepLog()
        return log

    # ----- time ---------------------------------------------------------------------------

    def next_step_start_s(self) -> float | None:
        """When the next step would start, or None when there is nothing to do."""
        if self.running:
            return self._clock_s
        if self.waiting:
            return max(self._clock_s, self.waiting[0].arrival_s)
        return None

    def step(self) -> StepResult | None:
        """Run one step at `next_step_start_s()`; None when there is nothing to do."""
        start_s = self.next_step_start_s()
        if start_s is None:
            return None
        plan = schedule(self.config, self.pool, self.running, self.waiting, start_s)
        result = StepResult(
            start_s,
            start_s,
            plan.num_prefill_tokens,
            plan.num_decode_tokens,
            plan.num_prefix_cache_queries,
            plan.num_prefix_cache_hits,
        )
        self.num_prefix_cache_queries_total += plan.num_prefix_cache_queries
        self.num_prefix_cache_hits_total += plan.num_prefix_cache_hits
        for victim in plan.preempted:
            result.preempted.append(victim.request_id)
        self.num_preemptions_total += len(plan.preempted)
        if not plan.scheduled:
            # Possible only when everything runnable was just preempted; the next call
            # schedules the queue again from the front.
            return result
        duration_s = self.timer.iteration_s(
            plan.num_decode_tokens, plan.decode_context_tokens, plan.prefill_chunks
        )
        end_s = start_s + duration_s
        result.end_s = end_s
        self._clock_s = end_s
        log = self.step_log
        log.start_s.append(start_s)
        log.duration_s.append(duration_s)
        log.num_prefill_tokens.append(plan.num_prefill_tokens)
        log.num_decode_tokens.append(plan.num_decode_tokens)

        any_finished = False
        for seq, num_new in plan.scheduled:
            seq.num_computed_tokens += num_new
            if seq.num_computed_tokens < seq.num_tokens:
                continue  # a prefill chunk that has not reached the end of the prompt
            seq.num_output_tokens += 1
            result.emitted.append(seq.request_id)
            if seq.first_token_s is None:
                seq.first_token_s = end_s
                result.first_token.append(seq.request_id)
                result.first_token_cached_tokens.append(seq.num_cached_tokens or 0)
            elif seq.itl_s is not None:
                seq.itl_s.append(end_s - seq.last_token_s)
            seq.last_token_s = end_s
            if seq.num_output_tokens >= seq.num_output_target:
                any_finished = True
                result.finished.append(self._finish(seq, end_s))
        if any_finished:
            self.running = [s for s in self.running if s.num_output_tokens < s.num_output_target]
        return result

    def advance_until(self, t_s: float) -> list[EngineEvent]:
        """Run every step that starts before `t_s`; return what happened, in time order."""
        events: list[EngineEvent] = []
        while True:
            start_s = self.next_step_start_s()
            if start_s is None or start_s >= t_s:
                break
            if self.config.enable_fast_forward and self._fast_forward(t_s, events):
                continue
            result = self.step()
            if result is None:
                break
            for rid in result.preempted:
                events.append(Preempted(rid, result.start_s))
            for rid in result.first_token:
                events.append(FirstToken(rid, result.end_s))
            for stats in result.finished:
                events.append(Finished(stats.request_id, stats.finish_s, stats))
        if self.idle:
            self._clock_s = max(self._clock_s, t_s)
        return events

    def drain(self, max_s: float = float("inf")) -> list[EngineEvent]:
        """Run until every queued request has finished (or virtual time `max_s`)."""
        return self.advance_until(max_s)

    # ----- internals ----------------------------------------------------------------------

    def _finish(self, seq: Sequence, end_s: float) -> RequestStats:
        self.pool.free(seq)
        self._ids.discard(seq.request_id)
        assert seq.first_scheduled_s is not None and seq.first_token_s is not None
        return RequestStats(
            request_id=seq.request_id,
            arrival_s=seq.arrival_s,
            first_scheduled_s=seq.first_scheduled_s,
            first_token_s=seq.first_token_s,
            finish_s=end_s,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=seq.num_output_tokens,
            num_cached_tokens=seq.num_cached_tokens or 0,
            finish_reason=seq.finish_reason,
            num_preemptions=seq.num_preemptions,
            itl_s=tuple(seq.itl_s) if seq.itl_s is not None else None,
        )

    def _fast_forward(self, t_s: float, events: list[EngineEvent]) -> bool:
        """Run a stretch of pure-decode steps in bulk; False if the next step is not one.

        A stretch is pure decode when every running sequence is decoding and no waiting
        sequence can be admitted: the queue is empty, its head arrives later (the stretch
        stops before it), or `max_num_seqs` are running (only a finish frees a seat, and a
        finish ends the stretch). The stretch also ends before any sequence would need a
        KV block that is not free, so no preemption can happen inside it. Each step is still
        priced by the timer; only the per-sequence bookkeeping is done once per stretch.
        """
        running = self.running
        n = len(running)
        if n == 0:
            return False
        stop_s = t_s
        if self.waiting and n < self.config.max_num_seqs:
            head_arrival_s = self.waiting[0].arrival_s
            if head_arrival_s <= self._clock_s:
                return False
            stop_s = min(stop_s, head_arrival_s)
        decode_context = 0
        max_steps = 1 << 62
        for seq in running:
            if seq.num_tokens - seq.num_computed_tokens != 1 or seq.first_token_s is None:
                return False
            decode_context += seq.num_computed_tokens + 1
            remaining = seq.num_output_target - seq.num_output_tokens
            if remaining < max_steps:
                max_steps = remaining
        if max_steps < _MIN_FAST_FORWARD_STEPS:
            return False
        max_steps = min(max_steps, self._steps_blocks_allow(max_steps))
        if max_steps < _MIN_FAST_FORWARD_STEPS:
            return False

        # Price the steps one by one (the timer decides), stopping at the first step that
        # would start at or after stop_s.
        timer = self.timer
        log = self.step_log
        ends: list[float] = []
        start_s = self._clock_s
        while len(ends) < max_steps and start_s < stop_s:
            duration_s = timer.iteration_s(n, decode_context)
            end_s = start_s + duration_s
            log.start_s.append(start_s)
            log.duration_s.append(duration_s)
            log.num_prefill_tokens.append(0)
            log.num_decode_tokens.append(n)
            ends.append(end_s)
            decode_context += n
            start_s = end_s
        num_steps = len(ends)
        if num_steps == 0:
            return False
        self._clock_s = start_s
        gaps = [b - a for a, b in pairwise(ends)] if self.config.record_itl else []
        last_end_s = ends[-1]
        first_end_s = ends[0]
        pool = self.pool
        any_finished = False
        for seq in running:
            seq.num_computed_tokens += num_steps
            seq.num_output_tokens += num_steps
            needed = pool.blocks_for(seq.num_computed_tokens) - seq.num_blocks
            if needed > 0:
                pool.grow(seq, needed)
            itl = seq.itl_s
            if itl is not None:
                itl.append(first_end_s - seq.last_token_s)
                itl.extend(gaps)
            seq.last_token_s = last_end_s
            if seq.num_output_tokens >= seq.num_output_target:
                any_finished = True
                stats = self._finish(seq, last_end_s)
                events.append(Finished(stats.request_id, last_end_s, stats))
        if any_finished:
            self.running = [s for s in running if s.num_output_tokens < s.num_output_target]
        return True

    def _steps_blocks_allow(self, max_steps: int) -> int:
        """The most decode steps (up to max_steps) the free KV blocks can carry everyone."""
        pool = self.pool
        running = self.running

        def blocks_needed(num_steps: int) -> int:
            total = 0
            for seq in running:
                extra = pool.blocks_for(seq.num_computed_tokens + num_steps) - seq.num_blocks
                if extra > 0:
                    total += extra
            return total

        if blocks_needed(max_steps) <= pool.num_free:
            return max_steps
        lo, hi = 0, max_steps  # blocks_needed(lo) fits, blocks_needed(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if blocks_needed(mid) <= pool.num_free:
                lo = mid
            else:
                hi = mid
        return lo
