"""The fleet of a disaggregated service: a prefill pool and a decode pool, the KV handed over
between them.

The loop is the pooled fleet's (fleet.pool_simulator) over two pools, prefill then decode, with
a hand-off between them:
- An arrival goes to a Ready prefill replica (the balancer's pick among that pool's pods). Its
  engine runs the prompt with one output token, as a prefill instance of vLLM's disaggregated
  serving does (max_tokens 1), its prefix cache as configured.
- When that request finishes, its KV travels to the decode pool: the hand-off lands
  `transfer_s(prompt tokens)` later and goes to the decode replica the balancer picks among
  those Ready then (with none Ready it waits for one). The decode engine receives the prompt's
  KV computed but for its last token, which it computes for the logits, and generates every
  token the client sees; the prefill engine's token is not streamed. The transfer is priced
  before the decode engine holds the request, so its KV blocks are taken on arrival.
- The request's TTFT is its decode engine's first token less its arrival at the fleet; its ITL
  is its decode engine's. Each engine's own histograms (a decode engine's TTFT counted from its
  receipt) and counters are its pod's page, so each pool's policy reads its own pool.
At each event time the prefill engines advance first, the hand-offs due by then go out at their
own times, and then the decode engines advance, so no decode engine runs past a hand-off it
should have received. A prompt plus its output longer than max_model_len is refused at arrival,
as the aggregated fleet's engines refuse it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from tokenpilot_lab.fleet.config import FleetConfig
from tokenpilot_lab.fleet.pool_simulator import FleetPool, PooledFleetSimulation, PooledResult
from tokenpilot_lab.fleet.pool_view import PoolsPolicy
from tokenpilot_lab.fleet.results import FleetResult
from tokenpilot_lab.fleet.simulator import ProgressFn, _Replica
from tokenpilot_lab.sim import Finished, FirstToken, SimRequest
from tokenpilot_lab.workload import Trace

PREFILL, DECODE = 0, 1


class DisaggregatedFleetSimulation(PooledFleetSimulation):
    """One run of one policy over a prefill pool and a decode pool; see the module docstring."""

    def __init__(
        self,
        trace: Trace,
        policy: PoolsPolicy,
        config: FleetConfig,
        prefill: FleetPool,
        decode: FleetPool,
        transfer_s: Callable[[int], float],
    ) -> None:
        super().__init__(trace, policy, config, (prefill, decode))
        self._transfer_s = transfer_s
        # Hand-offs in flight: (the time each lands, the request).
        self._in_flight: list[tuple[float, int]] = []
        self._waiting: deque[int] = deque()
        self._received_s = [math.nan] * trace.num_requests

    def _in_pool(self, pool_index: int) -> list[_Replica]:
        return [r for r in self._live if self._pool_of[r.index] == pool_index]

    # ----- the two phases ------------------------------------------------------------------

    def _advance(self, now_s: float) -> None:
        ended = self._advance_each(self._in_pool(PREFILL), now_s)
        self._hand_over(now_s)
        if self._advance_each(self._in_pool(DECODE), now_s) or ended:
            self._live = [r for r in self._live if r.ended_s is None]

    def _hand_over(self, now_s: float) -> None:
        """Every hand-off landed by `now_s`, each at its own time, in time order."""
        while self._in_flight and self._in_flight[0][0] <= now_s:
            at_s, index = heapq.heappop(self._in_flight)
            self._send_to_decode(index, at_s)

    def _send_to_decode(self, index: int, at_s: float) -> None:
        replica = self._pick_in(DECODE, at_s)
        if replica is None:
            self._waiting.append(index)
            return
        request = self.trace.requests[index]
        self._received_s[index] = at_s
        self._submit(
            replica,
            SimRequest(
                str(index),
                request.num_prompt_tokens,
                request.num_output_tokens,
                num_handed_over_tokens=request.num_prompt_tokens - 1,
            ),
            at_s,
        )

    def _pick(self, now_s: float) -> _Replica | None:
        return self._pick_in(PREFILL, now_s)

    def _pick_in(self, pool_index: int, now_s: float) -> _Replica | None:
        """The replica of the pool the balancer sends to at `now_s`; None when none is Ready."""
        ready = [r for r in self._in_pool(pool_index) if r.removed_s is None and r.ready_s <= now_s]
        if not ready:
            return None
        if self._least_request:
            return min(ready, key=lambda r: r.outstanding)
        return self._rng.choice(ready)

    def _dispatch(self, index: int, now_s: float) -> None:
        request = self.trace.requests[index]
        if (
            request.num_prompt_tokens + request.num_output_tokens
            > self.pools[DECODE].engine.max_model_len
        ):
            self._num_rejected += 1
            return
        super()._dispatch(index, now_s)

    def _engine_request(self, index: int) -> SimRequest:
        """A prefill engine is asked for one token."""
        return replace(super()._engine_request(index), num_output_tokens=1)

    def _dispatch_pending(self, now_s: float) -> None:
        super()._dispatch_pending(now_s)
        waiting, self._waiting = self._waiting, deque()
        for index in waiting:
            self._send_to_decode(index, now_s)

    def _on_event(self, replica: _Replica, event: object) -> None:
        decode = self._pool_of[replica.index] == DECODE
        if type(event) is Finished:
            stats = event.stats
            self._count_finished(replica, stats)
            index = int(stats.request_id)
            if decode:
                self._record(index, stats.first_token_s - self._arrival_s[index], stats.itl_s)
            else:
                landed_s = stats.finish_s + self._transfer_s(stats.num_prompt_tokens)
                heapq.heappush(self._in_flight, (landed_s, index))
        elif type(event) is FirstToken:
            index = int(event.request_id)
            since_s = self._received_s[index] if decode else self._arrival_s[index]
            self._count_first_token(replica, index, event.time_s - since_s)

    def _drain_engines(self) -> None:
        for replica in self._in_pool(PREFILL):
            for event in replica.engine.drain():
                self._on_event(replica, event)
        self._hand_over(math.inf)
        for replica in self._in_pool(DECODE):
            for event in replica.engine.drain():
                self._on_event(replica, event)

    def _result(self, end_s: float) -> FleetResult:
        result = super()._result(end_s)
        lost = len(self._waiting)
        if not lost:
            return result
        return replace(
            result,
            num_unserved=result.num_unserved + lost,
            notes=(
                *result.notes,
                f"{lost} request(s) prefilled never reached a Ready decode replica",
            ),
        )


def simulate_disaggregated(
    trace: Trace,
    policy: PoolsPolicy,
    config: FleetConfig,
    prefill: FleetPool,
    decode: FleetPool,
    transfer_s: Callable[[int], float],
    progress: ProgressFn | None = None,
) -> PooledResult:
    """Replay `trace` through a prefill and a decode pool scaled by `policy`."""
    return DisaggregatedFleetSimulation(
        trace, policy, config, prefill, decode, transfer_s
    ).run_pooled(progress)
