"""The fleet in virtual time: replicas of the engine model behind a balancer, under a policy.

The loop, one iteration per event (an arrival, a scrape, a policy evaluation, a replica
becoming Ready, a timeline sample), in time order:
1. Advance every live engine to the event time (`Engine.advance_until`), collecting finished
   requests; a draining replica with nothing left in flight is gone.
2. Starting replicas whose cold start has elapsed become Ready and take queued requests.
3. Arrivals go to a Ready, non-draining replica, as the fleet's balancer picks it: at random
   (`service`, kube-proxy's choice per connection, from the config's seed) or the one with
   the fewest requests in flight (`least-request`; ties to the oldest replica). With no Ready
   replica they wait at the balancer.
4. Scrapes record metrics; on its interval the policy sees a `FleetView` and its choice is
   applied: new replicas start cold, removed ones (starting first, then the newest Ready)
   stop taking requests and drain.
After the trace's last second no policy runs; the engines drain what they hold. GPU time is
billed from a replica's creation until it is gone, or until the run ends.

A policy may also move the engines to another batching (a re-tune): the Deployment's template
changes and its pods roll as the rendered strategy rolls them (maxSurge 1, maxUnavailable 0):
one new pod at a time beside the old ones, each old pod drained only once a new one is Ready
and enough stay Ready without it. Replicas added meanwhile start on the new batching; replicas
removed are the old ones first. Every surge pod's GPU time is billed as any pod's.
"""

from __future__ import annotations

import functools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot.core.autoscale.window import EngineSample
from tokenpilot.core.errors import InvalidSpec
from tokenpilot_lab.fleet.buckets import BucketCounter, EngineEdges, engine_edges
from tokenpilot_lab.fleet.config import Balancer, FleetConfig
from tokenpilot_lab.fleet.policies.base import FleetPolicy
from tokenpilot_lab.fleet.results import (
    FleetResult,
    Rollout,
    ScaleEvent,
    Timeline,
    request_itl_p99_s,
)
from tokenpilot_lab.fleet.view import FleetView
from tokenpilot_lab.sim import Engine, EngineConfig, Finished, FirstToken, SimRequest, StepTimer
from tokenpilot_lab.sim.events import RequestStats
from tokenpilot_lab.sim.prefix import chain
from tokenpilot_lab.sim.request import InvalidRequest
from tokenpilot_lab.workload import Trace

ProgressFn = Callable[[float], None]

# Each policy's run (and each sizing run) replays the same requests: chain their hashes once.
_chained = functools.lru_cache(maxsize=1 << 15)(chain)


class _Replica:
    __slots__ = (
        "config",
        "created_s",
        "ended_s",
        "engine",
        "index",
        "itl",
        "name",
        "num_output_tokens",
        "num_prefills",
        "num_prompt_tokens",
        "num_requests",
        "output_lengths",
        "outstanding",
        "prefill_s",
        "prompt_lengths",
        "ready_s",
        "removed_s",
        "ttft",
    )

    def __init__(
        self,
        index: int,
        config: EngineConfig,
        timer: StepTimer,
        edges: EngineEdges,
        created_s: float,
        ready_s: float,
    ) -> None:
        self.index = index
        self.name = f"replica-{index}"
        # The engine's own histograms, as its /metrics would expose them.
        self.ttft = BucketCounter(edges.ttft_s)
        self.itl = BucketCounter(edges.itl_s)
        self.prompt_lengths = BucketCounter(edges.tokens)
        self.output_lengths = BucketCounter(edges.tokens)
        # vLLM's request_prefill_time_seconds: its sum and count.
        self.prefill_s = 0.0
        self.num_prefills = 0
        self.config = config
        self.engine = Engine(config, timer)
        self.created_s = created_s
        self.ready_s = ready_s
        self.removed_s: float | None = None
        self.ended_s: float | None = None
        self.outstanding = 0
        # vLLM's counters, as the engine's /metrics would show them.
        self.num_prompt_tokens = 0
        self.num_output_tokens = 0
        self.num_requests = 0


class FleetSimulation:
    """One run of one policy over one trace. Call `run()` once."""

    def __init__(
        self,
        trace: Trace,
        policy: FleetPolicy,
        config: FleetConfig,
        engine_config: EngineConfig,
        timer: StepTimer,
    ) -> None:
        if trace.has_prefix_hashes and trace.hash_block_tokens % engine_config.block_size:
            raise InvalidSpec(
                f"{trace.name}: its prefix hashes stand for {trace.hash_block_tokens} tokens "
                f"each, not a whole number of KV blocks of {engine_config.block_size} tokens; "
                "use a block size that divides it"
            )
        self.trace = trace
        self.policy = policy
        self.config = config
        self.engine_config = engine_config
        self.timer = timer
        self._hash_block_tokens = trace.hash_block_tokens or engine_config.block_size
        n = trace.num_requests
        self._arrival_s = [r.arrival_s for r in trace.requests]
        self._ttft_s = [math.nan] * n
        self._itl_p99_s = [math.nan] * n
        self._num_met = 0
        self._num_rejected = 0
        self._replicas: list[_Replica] = []
        self._live: list[_Replica] = []
        self._pending: deque[int] = deque()
        # Not yet Ready, in Ready-time order (one cold start for all, created in time order).
        self._starting: deque[_Replica] = deque()
        self._last_pods: dict[str, EngineSample] = {}
        self._last_scrape_s = 0.0
        self._events: list[ScaleEvent] = []
        self._series_t: list[float] = []
        self._series_spec: list[int] = []
        self._series_ready: list[int] = []
        self._series_running: list[int] = []
        self._series_waiting: list[int] = []
        self._last_finish_s = 0.0
        self._least_request = config.balancer is Balancer.least_request
        self._rng = random.Random(config.balancer_seed)
        self._edges = engine_edges(engine_config.max_model_len, config.engine_buckets)
        # The Deployment's spec.replicas and its pod template's engine.
        self._desired = 0
        self._template = engine_config
        self._rollouts: list[Rollout] = []
        self._surge_s = 0.0
        self._rolled_to_s = 0.0

    # ----- fleet state ----------------------------------------------------------------------

    def _new_replica(self, created_s: float, ready_s: float) -> None:
        replica = _Replica(
            len(self._replicas), self._template, self.timer, self._edges, created_s, ready_s
        )
        self._replicas.append(replica)
        self._live.append(replica)
        if ready_s > created_s:
            self._starting.append(replica)

    def _serving(self, now_s: float) -> list[_Replica]:
        return [r for r in self._live if r.removed_s is None and r.ready_s <= now_s]

    def _spec_replicas(self) -> int:
        return self._desired

    def _pods(self) -> list[_Replica]:
        """The pods that exist and are not terminating: Ready, starting, old and new."""
        return [r for r in self._live if r.removed_s is None]

    # ----- the loop ---------------------------------------------------------------------------

    def run(self, progress: ProgressFn | None = None) -> FleetResult:
        cfg, policy, trace = self.config, self.policy, self.trace
        duration_s = trace.duration_s
        self._open()
        requests = trace.requests
        num_requests = len(requests)
        prometheus = policy.source is MetricsSourceType.prometheus
        next_arrival = 0
        next_scrape_s = 0.0 if prometheus else math.inf
        next_tick_s = policy.interval_s
        next_series_s = 0.0
        next_progress_s = 0.0
        progress_step_s = max(duration_s / 200.0, 1e-9)
        inf = math.inf

        while True:
            t_arrival = self._arrival_s[next_arrival] if next_arrival < num_requests else inf
            starting = self._starting
            t_ready = starting[0].ready_s if starting else inf
            t_clock = min(next_scrape_s, next_tick_s, next_series_s)
            if t_clock > duration_s:
                t_clock = inf
            now_s = min(t_arrival, t_ready, t_clock)
            if now_s == inf:
                break
            self._advance(now_s)
            if t_ready <= now_s:
                while starting and starting[0].ready_s <= now_s:
                    starting.popleft()
                if self._rollouts and self._rollouts[-1].finished_s is None:
                    self._roll(now_s)
                self._dispatch_pending(now_s)
            while next_arrival < num_requests and self._arrival_s[next_arrival] <= now_s:
                self._dispatch(next_arrival, now_s)
                next_arrival += 1
            if next_scrape_s <= now_s:
                self._scrape(now_s)
                next_scrape_s += cfg.scrape_interval_s
            if next_tick_s <= now_s:
                self._evaluate(now_s)
                next_tick_s += policy.interval_s
            if next_series_s <= now_s:
                self._series_t.append(now_s)
                self._series_spec.append(self._spec_replicas())
                self._series_ready.append(len(self._serving(now_s)))
                self._series_running.append(sum(r.engine.num_running for r in self._live))
                self._series_waiting.append(
                    sum(r.engine.num_waiting for r in self._live) + len(self._pending)
                )
                next_series_s += cfg.series_interval_s
            if progress is not None and now_s >= next_progress_s:
                progress(min(1.0, now_s / duration_s) if duration_s > 0 else 1.0)
                next_progress_s = now_s + progress_step_s

        end_s = self._drain(duration_s)
        if progress is not None:
            progress(1.0)
        return self._result(end_s)

    def _open(self) -> None:
        """The fleet at t=0: the opening replicas, Ready."""
        for _ in range(self.config.start_replicas):
            self._new_replica(0.0, 0.0)
        self._desired = self.config.start_replicas

    def _advance(self, now_s: float) -> None:
        if self._advance_each(self._live, now_s):
            self._live = [r for r in self._live if r.ended_s is None]

    def _advance_each(self, replicas: list[_Replica], now_s: float) -> bool:
        """Advance `replicas` to `now_s`, handling their events; True if a draining one ended."""
        ended = False
        for replica in replicas:
            engine = replica.engine
            if engine.idle:
                continue
            for event in engine.advance_until(now_s):
                self._on_event(replica, event)
            if replica.removed_s is not None and replica.outstanding == 0:
                replica.ended_s = max(replica.removed_s, engine.now_s)
                ended = True
        return ended

    def _on_event(self, replica: _Replica, event: object) -> None:
        if type(event) is Finished:
            stats = event.stats
            self._count_finished(replica, stats)
            self._record(int(stats.request_id), stats.first_token_s - stats.arrival_s, stats.itl_s)
        elif type(event) is FirstToken:
            index = int(event.request_id)
            self._count_first_token(replica, index, event.time_s - self._arrival_s[index])

    def _record(self, index: int, ttft_s: float, itl_s: tuple[float, ...] | None) -> None:
        """A request's outcome as its client saw it."""
        itl_p99_s = request_itl_p99_s(itl_s or ())
        self._ttft_s[index] = ttft_s
        self._itl_p99_s[index] = itl_p99_s
        if ttft_s <= self.config.ttft_slo_s and itl_p99_s <= self.config.itl_slo_s:
            self._num_met += 1

    def _count_finished(self, replica: _Replica, stats: RequestStats) -> None:
        """A finished request in its engine's own counters and histograms."""
        replica.outstanding -= 1
        replica.num_requests += 1
        replica.prompt_lengths.observe(stats.num_prompt_tokens)
        replica.output_lengths.observe(stats.num_output_tokens)
        replica.prefill_s += stats.first_token_s - stats.first_scheduled_s
        replica.num_prefills += 1
        if stats.finish_s > self._last_finish_s:
            self._last_finish_s = stats.finish_s

    def _count_first_token(self, replica: _Replica, index: int, ttft_s: float) -> None:
        """A first token in its engine's counters; `ttft_s` as the engine measures it."""
        replica.ttft.observe(ttft_s)
        replica.num_prompt_tokens += self.trace.requests[index].num_prompt_tokens
        replica.num_output_tokens += 1

    def _dispatch(self, index: int, now_s: float) -> None:
        best = self._pick(now_s)
        if best is None:
            self._pending.append(index)
            return
        self._submit(best, self._engine_request(index), now_s)

    def _engine_request(self, index: int) -> SimRequest:
        """What the engine an arrival goes to is asked: here the whole request."""
        request = self.trace.requests[index]
        return SimRequest(
            str(index),
            request.num_prompt_tokens,
            request.num_output_tokens,
            block_hashes=_chained(request.hash_ids) if request.hash_ids else (),
            hash_block_tokens=self._hash_block_tokens,
        )

    def _submit(self, replica: _Replica, request: SimRequest, now_s: float) -> None:
        try:
            replica.engine.submit(request, now_s)
        except InvalidRequest:
            # vLLM answers 400 for a prompt beyond max_model_len: counted, never retried.
            self._num_rejected += 1
            return
        replica.outstanding += 1

    def _pick(self, now_s: float) -> _Replica | None:
        """The replica the balancer sends an arrival to; None when none is Ready."""
        if self._least_request:
            best: _Replica | None = None
            for replica in self._live:
                if (
                    replica.removed_s is None
                    and replica.ready_s <= now_s
                    and (best is None or replica.outstanding < best.outstanding)
                ):
                    best = replica
            return best
        ready = [r for r in self._live if r.removed_s is None and r.ready_s <= now_s]
        return self._rng.choice(ready) if ready else None

    def _dispatch_pending(self, now_s: float) -> None:
        pending = self._pending
        self._pending = deque()
        while pending:
            self._dispatch(pending.popleft(), now_s)

    def _scrape(self, now_s: float) -> None:
        pods: dict[str, EngineSample] = {}
        for replica in self._serving(now_s):
            engine = replica.engine
            log = engine.drain_step_log()
            replica.itl.observe_steps(log.duration_s, log.num_decode_tokens)
            replica.num_output_tokens += sum(log.num_decode_tokens)
            pods[replica.name] = EngineSample(
                at_s=now_s,
                num_requests_waiting=float(engine.num_waiting),
                num_requests_running=float(engine.num_running),
                kv_cache_usage=engine.kv_cache_usage,
                itl_buckets=replica.itl.cumulative(),
                ttft_buckets=replica.ttft.cumulative(),
                prompt_tokens_total=float(replica.num_prompt_tokens),
                cached_prompt_tokens_total=float(engine.num_prefix_cache_hits_total),
                output_tokens_total=float(replica.num_output_tokens),
                requests_total=float(replica.num_requests),
                itl_sum_s=replica.itl.total,
                prompt_len_buckets=replica.prompt_lengths.cumulative(),
                prompt_len_sum=replica.prompt_lengths.total,
                output_len_buckets=replica.output_lengths.cumulative(),
                output_len_sum=replica.output_lengths.total,
                prefix_cache_queries_total=float(engine.num_prefix_cache_queries_total),
                prefill_sum_s=replica.prefill_s,
                prefill_count=float(replica.num_prefills),
            )
        # Draining replicas are no longer scraped (not Ready); their step logs are let go.
        for replica in self._live:
            if replica.removed_s is not None:
                replica.engine.drain_step_log()
        self._last_pods = pods
        self._last_scrape_s = now_s

    def _evaluate(self, now_s: float) -> None:
        policy = self.policy
        if policy.source is MetricsSourceType.direct:
            self._scrape(now_s)
        spec = self._spec_replicas()
        serving = self._serving(now_s)
        num_ready = len(serving)
        view = FleetView(
            now_s=now_s,
            scraped_at_s=self._last_scrape_s,
            spec_replicas=spec,
            num_ready=num_ready,
            num_starting=len(self._pods()) - num_ready,
            pods=self._last_pods,
            pod_startups_s={
                r.name: r.ready_s - r.created_s for r in serving if r.ready_s > r.created_s
            },
            batching={
                r.name: (r.config.max_num_batched_tokens, r.config.max_num_seqs) for r in serving
            },
            rolling_out=bool(self._rollouts) and self._rollouts[-1].finished_s is None,
        )
        choice = policy.decide(view)
        desired = max(self.config.min_replicas, min(self.config.max_replicas, choice.replicas))
        if desired != spec:
            self._events.append(ScaleEvent(now_s, spec, desired, choice.reason))
            self._scale(now_s, spec, desired)
        if choice.batching is not None:
            self._retune(now_s, *choice.batching)
        if self._rollouts and self._rollouts[-1].finished_s is None:
            self._roll(now_s)

    def _scale(self, now_s: float, spec: int, desired: int) -> None:
        self._desired = desired
        if desired > spec:
            for _ in range(desired - spec):
                self._new_replica(now_s, now_s + self.config.cold_start_s)
            return
        # Kubernetes removes pods that are not Ready first; here the old batching's next (a
        # rollout's old ReplicaSet), then the newest.
        victims = sorted(
            self._pods(),
            key=lambda r: (r.ready_s <= now_s, r.config is self._template, -r.created_s, -r.index),
        )
        for replica in victims[: spec - desired]:
            self._remove(replica, now_s)
        self._live = [r for r in self._live if r.ended_s is None]

    def _remove(self, replica: _Replica, now_s: float) -> None:
        """Out of the Service's endpoints: it takes no more requests and drains."""
        replica.removed_s = now_s
        if replica.outstanding == 0:
            replica.ended_s = now_s

    def _retune(self, now_s: float, token_budget: int, max_num_seqs: int) -> None:
        """A new pod template: the engines at another batching, rolled out from now on."""
        current = self._template
        if (current.max_num_batched_tokens, current.max_num_seqs) == (token_budget, max_num_seqs):
            return
        self._template = replace(
            current, max_num_batched_tokens=token_budget, max_num_seqs=max_num_seqs
        )
        if self._rollouts and self._rollouts[-1].finished_s is None:
            # A rollout superseded: what it surged so far is its own.
            self._roll(now_s)
            self._rollouts[-1] = replace(
                self._rollouts[-1], finished_s=now_s, surge_gpu_hours=self._surge_gpu_hours()
            )
        self._surge_s, self._rolled_to_s = 0.0, now_s
        self._rollouts.append(
            Rollout(
                started_s=now_s,
                finished_s=None,
                from_batching=(current.max_num_batched_tokens, current.max_num_seqs),
                to_batching=(token_budget, max_num_seqs),
            )
        )
        self._roll(now_s)

    def _roll(self, now_s: float) -> None:
        """One step of the rollout at `now_s` (`roll_step`)."""
        self._surge_s += max(0, len(self._pods()) - self._desired) * (now_s - self._rolled_to_s)
        self._rolled_to_s = now_s
        if roll_step(
            self._pods,
            self._template,
            self._desired,
            now_s,
            remove=lambda replica: self._remove(replica, now_s),
            add=lambda: self._new_replica(now_s, now_s + self.config.cold_start_s),
        ):
            self._rollouts[-1] = replace(
                self._rollouts[-1], finished_s=now_s, surge_gpu_hours=self._surge_gpu_hours()
            )
        self._live = [r for r in self._live if r.ended_s is None]

    def _surge_gpu_hours(self) -> float:
        return self._surge_s * self.config.gpus_per_replica / 3600.0

    def _drain(self, duration_s: float) -> float:
        """Finish what the engines hold; requests still at the balancer are unserved."""
        self._drain_engines()
        end_s = max(duration_s, self._last_finish_s)
        for replica in self._live:
            if replica.removed_s is not None:
                replica.ended_s = max(replica.removed_s, replica.engine.now_s)
        return end_s

    def _drain_engines(self) -> None:
        for replica in self._live:
            for event in replica.engine.drain():
                self._on_event(replica, event)

    def _result(self, end_s: float) -> FleetResult:
        cfg = self.config
        gpu_s = 0.0
        for replica in self._replicas:
            stop_s = end_s if replica.ended_s is None else min(replica.ended_s, end_s)
            gpu_s += max(0.0, stop_s - replica.created_s) * cfg.gpus_per_replica
        gpu_hours = gpu_s / 3600.0
        notes = []
        if self._num_rejected:
            notes.append(f"{self._num_rejected} request(s) rejected: longer than max_model_len")
        if self._pending:
            notes.append(f"{len(self._pending)} request(s) never reached a Ready replica")
        engines = [replica.engine for replica in self._replicas]
        return FleetResult(
            policy=self.policy.name,
            num_requests=self.trace.num_requests,
            num_met=self._num_met,
            num_rejected=self._num_rejected,
            num_unserved=len(self._pending),
            duration_s=self.trace.duration_s,
            ttft_s=tuple(self._ttft_s),
            itl_p99_s=tuple(self._itl_p99_s),
            gpu_hours=gpu_hours,
            cost_usd=gpu_hours * cfg.usd_per_gpu_hour,
            scale_events=tuple(self._events),
            timeline=Timeline(
                tuple(self._series_t),
                tuple(self._series_spec),
                tuple(self._series_ready),
                tuple(self._series_running),
                tuple(self._series_waiting),
            ),
            notes=tuple(notes),
            rollouts=tuple(self._rollouts),
            num_prefix_cache_queries=sum(e.num_prefix_cache_queries_total for e in engines),
            num_prefix_cache_hits=sum(e.num_prefix_cache_hits_total for e in engines),
        )


def simulate(
    trace: Trace,
    policy: FleetPolicy,
    config: FleetConfig,
    engine_config: EngineConfig,
    timer: StepTimer,
    progress: ProgressFn | None = None,
) -> FleetResult:
    """Replay `trace` through a fleet scaled by `policy`; see the module docstring."""
    return FleetSimulation(trace, policy, config, engine_config, timer).run(progress)


def roll_step(
    pods: Callable[[], list[_Replica]],
    template: EngineConfig,
    desired: int,
    now_s: float,
    *,
    remove: Callable[[_Replica], None],
    add: Callable[[], None],
) -> bool:
    """A Deployment's rollout to `template` at `now_s`, as far as it goes: at most one pod over
    `desired` (maxSurge 1), and an old pod goes only when the Ready pods stay at `desired`
    without it (maxUnavailable 0; one not yet Ready goes at once). True once no old pod is
    left."""
    while True:
        current = pods()
        old = [r for r in current if r.config is not template]
        if not old:
            return True
        ready = [r for r in current if r.ready_s <= now_s]
        starting_old = [r for r in old if r.ready_s > now_s]
        if len(current) > desired and starting_old:
            remove(max(starting_old, key=lambda r: r.created_s))
        elif len(current) > desired and len(ready) > desired:
            remove(max((r for r in old if r.ready_s <= now_s), key=lambda r: r.created_s))
        elif len(current) <= desired:
            add()
        else:
            return False
