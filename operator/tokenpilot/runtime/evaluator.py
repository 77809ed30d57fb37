"""The autoscaler loop: one operator-wide task evaluating every autoscaling LLMService.

Each round reads the LLMServices and the Ready engine pods of the operator's namespaces from
watch-fed caches (adapters/kube/watch.py; listed once, then kept current by a watch), or, while
a cache is not current, lists them (one listing each per namespace whatever the number of
services), and evaluates every one with
spec.autoscaling.enabled that is due (its own `spec.autoscaling.interval`, 5 s by default, has
elapsed) or will be within `ROUND_S`, `max_under_way` at a time (runtime.service_loop). A
service evaluated early is next due an interval after it was due, so its cadence is its
interval; the services due within one round share its listings, so rounds come at most once
every `ROUND_S` while they keep up, however many services there are.

No per-object daemon or timer: kopf would put its finalizer on every autoscaled object, and an
LLMService could not be deleted while the operator is down. Deletion stays the garbage
collector's job, as for the reconciler.

Every evaluation has a time limit and its own error handling, so a broken engine or an
unreachable Prometheus holds that service only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.autoscaler_memory import shard_of
from tokenpilot.adapters.kube.llmservices import list_llmservices
from tokenpilot.adapters.kube.pods import (
    ENGINE_PODS,
    PODS,
    by_service,
    engine_endpoint,
    ready_engine_pods_by_service,
)
from tokenpilot.adapters.kube.resources import LLMSERVICES
from tokenpilot.adapters.kube.shards import ShardKeeper
from tokenpilot.adapters.kube.watch import WatchCache
from tokenpilot.adapters.metrics import PodEndpoint
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.runtime.memories import Key, MemoryKeeper
from tokenpilot.runtime.phases_loop import PhasesLoop
from tokenpilot.runtime.service_loop import FALLBACK_INTERVAL_S, AutoscalerRuntime, ServiceLoop

log = logging.getLogger("tokenpilot.autoscaler")

# The longest the stop waits for the last memory write.
MEMORY_WRITE_AT_STOP_S = 10.0
# The longest one evaluation may take (scrapes have their own, shorter timeout).
EVALUATION_TIMEOUT_S = 30.0
# The longest the loop sleeps between listings, so a new service is seen this soon.
MAX_IDLE_S = 2.0
# How far ahead of its due time a round evaluates a service rather than list again for it.
ROUND_S = 1.0
# How many evaluations a round runs at once. Their API calls share asyncio's thread pool (six
# threads on two cores), so more at once only queue there, each deciding on a reading that
# ages while it waits for a thread (docs/reliability.md, Soak). A bounded evaluation scrapes,
# decides and applies in one go, and its time limit counts its own work.
MAX_EVALUATIONS_UNDER_WAY = 32

Due = tuple[Key, Mapping[str, Any], tuple[PodEndpoint, ...]]


def _enabled(body: Mapping[str, Any]) -> bool:
    meta = body.get("metadata", {})
    return bool(body.get("spec", {}).get("autoscaling", {}).get("enabled")) and not meta.get(
        "deletionTimestamp"
    )


@dataclass
class Evaluator:
    """The operator-wide loop's state: one ServiceLoop per autoscaled service, and when each
    is due next (monotonic seconds)."""

    runtime: AutoscalerRuntime
    client: KubeClient
    namespaces: Sequence[str] = ()
    profile_of: Callable[[str], GPUProfile] | None = None
    loops: dict[Key, ServiceLoop | PhasesLoop] = field(default_factory=dict)
    due_s: dict[Key, float] = field(default_factory=dict)
    started_s: dict[Key, float] = field(default_factory=dict)  # each one's last evaluation
    max_under_way: int = MAX_EVALUATIONS_UNDER_WAY
    evaluation_timeout_s: float = EVALUATION_TIMEOUT_S
    # Watch-fed caches of the LLMServices and of the Ready engine pods (`watch`); without
    # them, or while one is not current, a round lists.
    services_cache: WatchCache | None = None
    pods_cache: WatchCache | None = None
    # With autoscaler shards (several replicas share the services): the shards this replica
    # holds; a round evaluates only their services, each writing behind its shard's fence.
    shards: ShardKeeper | None = None
    _held: frozenset[int] = field(default=frozenset(), init=False, repr=False)
    _own_caches: list[WatchCache] = field(default_factory=list, init=False, repr=False)
    memories: MemoryKeeper = field(init=False)
    _slots: asyncio.Semaphore | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        shards = self.shards
        self.memories = MemoryKeeper(
            self.client,
            self.runtime.config.memory_namespace,
            owns=None if shards is None else lambda m: shards.shard_of_memory(m) in self._held,
            client_of=None
            if shards is None
            else lambda m: shards.client_for(shards.shard_of_memory(m)),
        )

    def _ours(self, key: Key) -> bool:
        return self.shards is None or self.shards.shard_of_memory(shard_of(key)) in self._held

    def _client_of(self, key: Key) -> KubeClient:
        if self.shards is None:
            return self.client
        return self.shards.client_for(self.shards.shard_of_memory(shard_of(key)))

    def watch(self, services: WatchCache | None = None) -> None:
        """Start the caches: rounds read them from their first listing on. `services`: the
        operator's cache of the LLMServices (its owner starts and stops it), else one of
        the evaluator's own."""
        if services is None:
            services = WatchCache(self.client, LLMSERVICES, self.namespaces)
            services.start()
            self._own_caches.append(services)
        self.services_cache = services
        self.pods_cache = WatchCache(
            self.client, PODS, self.namespaces, query=ENGINE_PODS, keep=engine_endpoint
        )
        self.pods_cache.start()
        self._own_caches.append(self.pods_cache)

    def stop_watching(self) -> None:
        for cache in self._own_caches:
            cache.stop()

    async def _llmservices(self) -> list[dict[str, Any]]:
        cached = self.services_cache.snapshot() if self.services_cache else None
        self._count_read("llmservices", cached)
        if cached is not None:
            return cached
        return await asyncio.to_thread(list_llmservices, self.client, self.namespaces)

    async def _ready_pods(self) -> dict[Key, tuple[PodEndpoint, ...]]:
        cached = self.pods_cache.snapshot() if self.pods_cache else None
        self._count_read("pods", cached)
        if cached is not None:
            return by_service(cached)
        return await asyncio.to_thread(ready_engine_pods_by_service, self.client, self.namespaces)

    def _count_read(self, kind: str, cached: list[Any] | None) -> None:
        source = "listing" if cached is None else "watch"
        self.runtime.metrics.round_reads.labels(kind, source).inc()

    async def round(self) -> float:
        """Evaluate every due service, `max_under_way` at a time; returns the seconds until
        the next is due. The round waits for all of them: rounds that did not wait started
        evaluations faster than the API calls behind them finished (docs/reliability.md)."""
        clock = self.runtime.clock
        if self.shards is None:
            self.runtime.metrics.shards_held.set(1)  # every service: one shard, all of it
        else:
            held = self.shards.held()
            if held - self._held:
                self.memories.read_again()  # taken over: its last holder's memories are newer
            self._held = held
            self.runtime.metrics.shards_held.set(len(held))
        await self.memories.read(clock.monotonic_s())
        items = await self._llmservices()
        keyed = (
            ((item["metadata"].get("namespace") or "default", item["metadata"]["name"]), item)
            for item in items
            if _enabled(item)
        )
        bodies = {key: item for key, item in keyed if self._ours(key)}
        for key in set(self.loops) - set(bodies):
            self._forget(key)
        self.memories.keep_only(bodies)
        now_s = clock.monotonic_s()
        due = [key for key in bodies if self.due_s.get(key, now_s) <= now_s + ROUND_S]
        if due:
            pods = await self._ready_pods()
            waits = await self.evaluate_all([(key, bodies[key], pods.get(key, ())) for key in due])
            for key, wait_s in zip(due, waits, strict=True):
                # Early: an interval after it was due; late: an interval from now.
                self.due_s[key] = max(self.due_s.get(key, now_s), now_s) + wait_s
        await self.write_memories(only_due=True)
        # Everything due before now + ROUND_S was taken: the next round is no sooner.
        next_due_s = min(self.due_s.values(), default=now_s + MAX_IDLE_S + ROUND_S) - ROUND_S
        next_s = max(next_due_s, now_s + ROUND_S) - clock.monotonic_s()
        return max(0.0, min(next_s, MAX_IDLE_S))

    async def evaluate_all(self, due: Sequence[Due]) -> list[float]:
        """Evaluate each (service, listed body, Ready pods), `max_under_way` at a time; the
        seconds each asks to wait, in order."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_under_way)
        slots = self._slots

        async def bounded(key: Key, body: Mapping[str, Any], pods: Any) -> float:
            async with slots:
                return await self._evaluate(key, body, pods)

        return list(await asyncio.gather(*(bounded(*item) for item in due)))

    async def _evaluate(
        self, key: Key, body: Mapping[str, Any], pods: tuple[PodEndpoint, ...]
    ) -> float:
        loop = self.loops.get(key)
        # A disaggregated service is scaled pool by pool; a spec that splits or joins its
        # phases starts the other kind afresh.
        kind = PhasesLoop if body.get("spec", {}).get("disaggregation") else ServiceLoop
        if not isinstance(loop, kind):
            if loop is not None:
                await loop.release()  # its status speaks of a loop that no longer runs
            loop = kind(
                self.runtime,
                self._client_of(key),
                *key,
                profile_of=self.profile_of,
                memory=self.memories.take(key) if loop is None else None,
            )
            self.loops[key] = loop
        started_s = self.runtime.clock.monotonic_s()
        if (last_s := self.started_s.get(key)) is not None:
            self.runtime.metrics.evaluation_gap_s.observe(started_s - last_s)
        self.started_s[key] = started_s
        try:
            # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancel (shutdown).
            async with asyncio.timeout(self.evaluation_timeout_s):
                return await loop.evaluate(body, pods)
        except TimeoutError:
            # A hung API call or scrape: this service skips a round, the others go on.
            log.warning("%s/%s: evaluation took over %g s", *key, self.evaluation_timeout_s)
        except Exception:
            # A bug must not stop the autoscaling of every other service; log it loudly.
            log.exception("%s/%s: evaluation failed", *key)
        return FALLBACK_INTERVAL_S

    async def write_memories(self, *, only_due: bool = False) -> None:
        """Write the memory shards that are due (all of them at shutdown)."""
        await self.memories.write(self.runtime.clock.monotonic_s(), self.loops, only_due=only_due)

    async def wind_down(self) -> None:
        """After the rounds have stopped: stop the caches, write every memory for the next
        process (bounded, so a stuck API server cannot hold a shutdown), close the scrapers."""
        self.stop_watching()
        try:
            async with asyncio.timeout(MEMORY_WRITE_AT_STOP_S):
                await self.write_memories()
        except TimeoutError:
            log.warning(
                "autoscaler: the memory write at stop took over %g s", MEMORY_WRITE_AT_STOP_S
            )
        await self.runtime.sources.aclose()

    def _forget(self, key: Key) -> None:
        """A deleted (or no longer autoscaled) service: drop its state and its series."""
        self.loops.pop(key, None)
        self.due_s.pop(key, None)
        self.started_s.pop(key, None)
        with contextlib.suppress(KeyError):
            self.runtime.metrics.forget(*key)


async def run_forever(evaluator: Evaluator) -> None:
    """Rounds until cancelled; a failed listing is retried after MAX_IDLE_S."""
    while True:
        try:
            wait_s = await evaluator.round()
        except KubeError as error:
            # The API server hiccupped; the next round lists again.
            log.warning("autoscaler: cannot list LLMServices or engine pods: %s", error)
            wait_s = MAX_IDLE_S
        await asyncio.sleep(wait_s)
