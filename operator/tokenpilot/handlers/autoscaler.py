"""The autoscaler loop: one operator-wide task evaluating every autoscaling LLMService.

The task starts with the operator (kopf.on.startup) and stops with it. Each round lists the
LLMServices and the engine pods of the operator's namespaces, one listing each per namespace
whatever the number of services, and evaluates every one with spec.autoscaling.enabled whose
own `spec.autoscaling.interval` (5 s by default) has elapsed, a bounded number at a time.
No per-object daemon or timer: kopf would put its finalizer on every autoscaled object, and an
LLMService could not be deleted while the operator is down. Deletion stays the garbage
collector's job, as for the reconciler.

One evaluation of one service

    spec.replicas (the scale subresource's) and conditions        [the round's listing]
    and the Ready engine pods
    reads the pods' metrics through the service's source          [metrics adapter]
    step(state, samples, current, now) -> state, decision,        [core, pure:
        actions                                                    core.autoscale.loop]
    carries out the actions: spec.replicas through the scale      [kube adapter]
    subresource, the Event, the status the autoscaler owns
    exports the decision, the bounds, the SLO targets and the replica's hourly cost

Every evaluation has a time limit and its own error handling, so a broken engine or an
unreachable Prometheus holds that service only. An API error skips one evaluation; the next
interval is the retry. The reconciler owns everything else in status and propagates
spec.replicas to the Deployment.

The process-wide part (the metrics sources) is built at startup from `memo.autoscaler_config`
(an AutoscalerConfig; defaults when absent); the operator's metrics are `memo.operator_metrics`,
served by the process since before it led. Time comes from the
runtime's clock (adapters/clock.py): monotonic seconds for windows, wall time for status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import kopf
from pydantic import ValidationError

from tokenpilot.adapters.clock import SYSTEM_CLOCK, Clock
from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.autoscaler_memory import (
    SHARDS,
    read_memories,
    shard_of,
    write_shard,
)
from tokenpilot.adapters.kube.events import post_event
from tokenpilot.adapters.kube.llmservices import list_llmservices
from tokenpilot.adapters.kube.pods import ready_engine_pods_by_service
from tokenpilot.adapters.kube.scale import write_scale
from tokenpilot.adapters.kube.status import AUTOSCALER, apply_status
from tokenpilot.adapters.metrics import MetricsSources, PodEndpoint, ServiceTarget
from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.autoscale import AutoscalePolicy, Decision
from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.autoscale.correction import measured_pace
from tokenpilot.core.autoscale.loop import (
    Action,
    ApplyStatus,
    Current,
    Now,
    PostEvent,
    ScaleTo,
    ServiceState,
    step,
    unusable_spec,
)
from tokenpilot.core.autoscale.memory import InvalidMemory, restore, snapshot
from tokenpilot.core.autoscale.spec import evaluation_interval_s, policy_from_spec, replica_model
from tokenpilot.core.errors import InvalidSpec, TokenPilotError
from tokenpilot.core.profiles import GPUProfile
from tokenpilot.handlers import background

log = logging.getLogger("tokenpilot.autoscaler")

# Used when the spec cannot be read at all: how soon to look again.
FALLBACK_INTERVAL_S = 5.0
# The longest one evaluation may take (scrapes have their own, shorter timeout).
EVALUATION_TIMEOUT_S = 30.0
# The longest the loop sleeps between listings, so a new service is seen this soon.
MAX_IDLE_S = 2.0
# How many evaluations a round runs at once. Their API calls share asyncio's thread pool (six
# threads on two cores), so more at once only queue there: measured at 1,000 services with all
# started together, each scraped, then waited up to 30 s for a thread to apply its status,
# deciding on a stale reading and often timing out (docs/reliability.md, Soak). A bounded
# evaluation scrapes, decides and applies in one go, and its time limit counts its own work.
MAX_EVALUATIONS_UNDER_WAY = 32
# The longest the shutdown waits for the last memory write.
MEMORY_WRITE_AT_STOP_S = 10.0
# How often each service's memory is written for a later process (and once more at shutdown):
# a process killed between writes leaves a memory this much older, which resumes with a hole
# (core.autoscale.memory). One shard a beat, so at 1,000 services about one write in 4 s.
MEMORY_EVERY_S = 60.0


@dataclass(frozen=True)
class AutoscalerConfig:
    """Process-wide autoscaler settings (command-line flags of `tokenpilot run`)."""

    scrape_timeout_s: float = 2.0
    # Where each service's memory is kept across restarts (the operator's own namespace, that
    # of --gpu-profiles-configmap); None: nowhere, a restart starts every service afresh.
    memory_namespace: str | None = None


@dataclass
class AutoscalerRuntime:
    """Shared by every service's loop: the metrics sources, the operator's metrics, the clock."""

    config: AutoscalerConfig
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    sources: MetricsSources = field(init=False)
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self) -> None:
        self.sources = MetricsSources(timeout_s=self.config.scrape_timeout_s)


@dataclass
class ServiceLoop:
    """One service's evaluations: read, `step`, carry out the actions. `state` is the pure
    state machine's (tokenpilot.core.autoscale.loop); nothing else is remembered here."""

    runtime: AutoscalerRuntime
    client: KubeClient
    namespace: str
    name: str
    profile_of: Callable[[str], GPUProfile] | None = None
    state: ServiceState | None = None
    # What an earlier process remembered of the service, restored at the first evaluation.
    memory: Mapping[str, Any] | None = None

    async def evaluate(self, body: Mapping[str, Any], pods: tuple[PodEndpoint, ...]) -> float:
        """One evaluation of the service as `body` (its listing) and `pods` (its Ready engine
        pods, listed in the same round) show it; returns the seconds to wait before the next."""
        clock = self.runtime.clock
        started_s = clock.monotonic_s()
        try:
            service = LLMService.model_validate(dict(body))
            policy = policy_from_spec(service.spec, self._replica_model(service))
            interval_s = evaluation_interval_s(service.spec)
        except (ValidationError, InvalidSpec) as error:
            # The user must fix the spec; keep the replicas and say so in status.
            replicas = int(body.get("spec", {}).get("replicas", 0))
            now = Now(clock.monotonic_s(), clock.now_rfc3339())
            state = self.state or ServiceState(AutoscalePolicy())
            self.state, actions = unusable_spec(state, replicas, str(error), now)
            await self._carry_out(None, actions, previous=state)
            return FALLBACK_INTERVAL_S
        state = (
            self._first_state(ServiceState(policy, interval_s=interval_s))
            if self.state is None
            else replace(self.state, policy=policy, interval_s=interval_s)
        )
        # The scale subresource's spec.replicas is the listed object's own spec.replicas.
        scale = service.spec.replicas
        target = ServiceTarget(
            self.namespace,
            self.name,
            scale,
            len(pods),
            pods,
            read_ttft=policy.ttft_p99_slo_s is not None,
        )
        source = self.runtime.sources.for_spec(service.spec.autoscaling.metrics)
        samples = await source.read(target, clock.monotonic_s())
        current = Current(
            scale, len(pods), service.metadata.generation, tuple(service.status.conditions)
        )
        now = Now(clock.monotonic_s(), clock.now_rfc3339())
        self.state, decision, actions = step(state, samples, current, now)
        await self._carry_out(service, actions, previous=state)
        self._export(service, policy, decision, clock.monotonic_s() - started_s)
        return interval_s

    def _first_state(self, fresh: ServiceState) -> ServiceState:
        """`fresh`, with the memory an earlier process wrote where there is one."""
        memory, self.memory = self.memory, None
        if memory is None:
            return fresh
        clock = self.runtime.clock
        try:
            restored = restore(fresh, memory, Now(clock.monotonic_s(), clock.now_rfc3339()))
        except InvalidMemory as error:
            log.warning("%s/%s: memory unreadable (%s); starting afresh", *self.key, error)
            return fresh
        outlook = restored.outlook
        log.info(
            "%s/%s: resumed the memory of an earlier process: %.0f s of load, %d jumps",
            *self.key,
            0.0 if outlook is None else outlook.span_s,
            len(restored.jumps),
        )
        return restored

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def memory_now(self) -> dict[str, Any] | None:
        """What to keep of this service for a later process: its memory now, or the one it
        was handed and has not yet restored."""
        if self.memory is not None:
            return dict(self.memory)
        if self.state is None:
            return None
        clock = self.runtime.clock
        return snapshot(self.state, Now(clock.monotonic_s(), clock.now_rfc3339()))

    def _replica_model(self, service: LLMService) -> ReplicaModel | None:
        """One replica as the step model prices it, once the reconciler has tuned it."""
        tuning = service.status.tuning
        if tuning is None or self.profile_of is None:
            return None
        try:
            return replica_model(service.spec, tuning, self.profile_of(tuning.sku))
        except TokenPilotError as error:
            # A SKU the catalog no longer knows or a spec that no longer fits: the SLO
            # signals alone still scale it.
            log.info("%s/%s: no capacity model: %s", self.namespace, self.name, error)
            return None

    async def _carry_out(
        self, service: LLMService | None, actions: Sequence[Action], *, previous: ServiceState
    ) -> None:
        """The actions in order; a failed call stops the rest (the next evaluation retries),
        and a status that was not applied is not remembered as applied."""
        try:
            for action in actions:
                if isinstance(action, ScaleTo):
                    await asyncio.to_thread(
                        write_scale, self.client, self.namespace, self.name, action.replicas
                    )
                    log.info(
                        "%s/%s: %d -> %d",
                        self.namespace,
                        self.name,
                        action.from_replicas,
                        action.replicas,
                    )
                elif isinstance(action, PostEvent) and service is not None:
                    await asyncio.to_thread(
                        post_event,
                        self.client,
                        namespace=self.namespace,
                        name=self.name,
                        uid=service.metadata.uid,
                        event=action.event,
                        now=self.runtime.clock.now_rfc3339(),
                    )
                elif isinstance(action, ApplyStatus):
                    await asyncio.to_thread(
                        apply_status,
                        self.client,
                        self.namespace,
                        self.name,
                        action.owned,
                        field_manager=AUTOSCALER,
                    )
        except KubeError as error:
            log.warning("%s/%s: cannot apply decision: %s", self.namespace, self.name, error)
            if self.state is not None:
                self.state = replace(self.state, applied=previous.applied)

    def _export(
        self,
        service: LLMService,
        policy: AutoscalePolicy,
        decision: Decision,
        evaluation_s: float,
    ) -> None:
        metrics, tuning = self.runtime.metrics, service.status.tuning
        metrics.record_decision(self.namespace, self.name, decision, evaluation_s)
        metrics.record_targets(
            self.namespace,
            self.name,
            min_replicas=policy.min_replicas,
            max_replicas=policy.max_replicas,
            attainment=service.spec.slo.attainment,
            itl_p99_s=policy.itl_p99_slo_s,
            ttft_p99_s=policy.ttft_p99_slo_s,
            token_budget=None if tuning is None else tuning.max_num_batched_tokens,
        )
        metrics.record_replica_cost(self.namespace, self.name, *self._replica_cost(service))
        readings = () if self.state is None else self.state.pace_readings
        metrics.record_pace(self.namespace, self.name, measured_pace(readings))

    def _replica_cost(self, service: LLMService) -> tuple[str | None, float | None]:
        """The SKU in use and one replica's hourly cost in USD, when both are known."""
        tuning = service.status.tuning
        if tuning is None or self.profile_of is None:
            return None, None
        try:
            profile = self.profile_of(tuning.sku)
        except TokenPilotError:
            # A SKU the catalog no longer knows: no cost series rather than a wrong one.
            return tuning.sku, None
        return tuning.sku, profile.hourly_cost_usd * service.spec.gpus_per_replica


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
    loops: dict[tuple[str, str], ServiceLoop] = field(default_factory=dict)
    due_s: dict[tuple[str, str], float] = field(default_factory=dict)
    max_under_way: int = MAX_EVALUATIONS_UNDER_WAY
    _slots: asyncio.Semaphore | None = field(default=None, init=False, repr=False)
    # The memories an earlier process wrote, until each service's loop takes its own (None
    # until they are read; nothing is written before, so an unread memory is never lost).
    _carried: dict[tuple[str, str], dict[str, Any]] | None = field(default=None, init=False)
    _shard_due_s: dict[int, float] = field(default_factory=dict, init=False)
    _shards_kept: set[int] = field(default_factory=set, init=False)

    async def round(self) -> float:
        """Evaluate every due service, `max_under_way` at a time; returns the seconds until
        the next is due.

        The round waits for all of them: measured at 1,000 services, rounds that did not wait
        started evaluations faster than the API calls behind them finished
        (docs/reliability.md, Soak)."""
        clock = self.runtime.clock
        await self._read_memories()
        items = await asyncio.to_thread(list_llmservices, self.client, self.namespaces)
        bodies = {
            (item["metadata"].get("namespace") or "default", item["metadata"]["name"]): item
            for item in items
            if _enabled(item)
        }
        for key in set(self.loops) - set(bodies):
            self._forget(key)
        if self._carried is not None:
            for key in set(self._carried) - set(bodies):
                del self._carried[key]
        now_s = clock.monotonic_s()
        due = [key for key in bodies if self.due_s.get(key, now_s) <= now_s]
        if due:
            pods = await asyncio.to_thread(
                ready_engine_pods_by_service, self.client, self.namespaces
            )
            waits = await self.evaluate_all([(key, bodies[key], pods.get(key, ())) for key in due])
            for key, wait_s in zip(due, waits, strict=True):
                self.due_s[key] = now_s + wait_s
        await self.write_memories(only_due=True)
        next_s = min(self.due_s.values(), default=now_s + MAX_IDLE_S) - clock.monotonic_s()
        return max(0.0, min(next_s, MAX_IDLE_S))

    async def evaluate_all(
        self, due: Sequence[tuple[tuple[str, str], Mapping[str, Any], tuple[PodEndpoint, ...]]]
    ) -> list[float]:
        """Evaluate each (service, listed body, Ready pods), `max_under_way` at a time; the
        seconds each asks to wait, in order."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_under_way)
        slots = self._slots

        async def bounded(key: tuple[str, str], body: Mapping[str, Any], pods: Any) -> float:
            async with slots:
                return await self._evaluate(key, body, pods)

        return list(await asyncio.gather(*(bounded(*item) for item in due)))

    async def _evaluate(
        self, key: tuple[str, str], body: Mapping[str, Any], pods: tuple[PodEndpoint, ...]
    ) -> float:
        loop = self.loops.get(key)
        if loop is None:
            carried = None if self._carried is None else self._carried.pop(key, None)
            loop = ServiceLoop(
                self.runtime, self.client, *key, profile_of=self.profile_of, memory=carried
            )
            self.loops[key] = loop
        try:
            # asyncio.timeout, not wait_for, which on Python 3.11 can lose a cancel (shutdown).
            async with asyncio.timeout(EVALUATION_TIMEOUT_S):
                return await loop.evaluate(body, pods)
        except TimeoutError:
            # A hung API call or scrape: this service skips a round, the others go on.
            log.warning("%s/%s: evaluation took over %g s", *key, EVALUATION_TIMEOUT_S)
        except Exception:
            # A bug must not stop the autoscaling of every other service; log it loudly.
            log.exception("%s/%s: evaluation failed", *key)
        return FALLBACK_INTERVAL_S

    async def _read_memories(self) -> None:
        """Once, before the first evaluation: the memories an earlier process wrote."""
        namespace = self.runtime.config.memory_namespace
        if namespace is None or self._carried is not None:
            return
        try:
            self._carried = await asyncio.to_thread(read_memories, self.client, namespace)
        except KubeError as error:
            log.warning(
                "autoscaler: cannot read the memories in %s (%s); retrying", namespace, error
            )
            return
        self._shards_kept = {shard_of(key) for key in self._carried}
        now_s = self.runtime.clock.monotonic_s()
        # Each shard on its own beat, so the writes spread over the interval.
        self._shard_due_s = {i: now_s + MEMORY_EVERY_S * (i + 1) / SHARDS for i in range(SHARDS)}
        if self._carried:
            log.info(
                "autoscaler: read the memory of %d services in %s", len(self._carried), namespace
            )

    async def write_memories(self, *, only_due: bool = False) -> None:
        """Write each shard that is due (every `MEMORY_EVERY_S`), or all of them (at
        shutdown); a failed write is logged and tried again at the shard's next beat."""
        namespace = self.runtime.config.memory_namespace
        if namespace is None or self._carried is None:
            return
        now_s = self.runtime.clock.monotonic_s()
        due = [
            index
            for index in range(SHARDS)
            if not only_due or self._shard_due_s.get(index, now_s) <= now_s
        ]
        if not due:
            return
        by_shard: dict[int, dict[tuple[str, str], dict[str, Any]]] = {i: {} for i in due}
        for key, memory in self._carried.items():
            if (index := shard_of(key)) in by_shard:
                by_shard[index][key] = memory
        for key, loop in self.loops.items():
            if (index := shard_of(key)) in by_shard and (kept := loop.memory_now()) is not None:
                by_shard[index][key] = kept
        for index, memories in by_shard.items():
            self._shard_due_s[index] = now_s + MEMORY_EVERY_S
            if not memories and index not in self._shards_kept:
                continue  # nothing to keep, nothing to drop
            try:
                await asyncio.to_thread(write_shard, self.client, namespace, index, memories)
            except KubeError as error:
                log.warning("autoscaler: cannot write memory shard %d: %s", index, error)
                continue
            self._shards_kept.add(index)

    def _forget(self, key: tuple[str, str]) -> None:
        """A deleted (or no longer autoscaled) service: drop its state and its series."""
        self.loops.pop(key, None)
        self.due_s.pop(key, None)
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


@kopf.on.startup()
async def _start_autoscaler(memo: Any, **_: Any) -> None:
    config = getattr(memo, "autoscaler_config", None) or AutoscalerConfig()
    shared = memo.runtime
    # The process's registry, served since start-up (handlers.operator.operate).
    metrics = getattr(memo, "operator_metrics", None) or OperatorMetrics()
    runtime = AutoscalerRuntime(config, metrics=metrics, clock=shared.clock)
    memo.autoscaler = runtime
    evaluator = Evaluator(runtime, shared.client, tuple(shared.namespaces), shared.by_name)
    memo.autoscaler_evaluator = evaluator
    memo.autoscaler_task = asyncio.create_task(run_forever(evaluator), name="autoscaler")


@kopf.on.cleanup()
async def _stop_autoscaler(memo: Any, **_: Any) -> None:
    await background.stop(getattr(memo, "autoscaler_task", None))
    evaluator: Evaluator | None = getattr(memo, "autoscaler_evaluator", None)
    if evaluator is not None:
        # What the next process resumes (an upgrade's rolling update stops the leader this
        # way); bounded, so a stuck API server cannot hold the shutdown.
        try:
            async with asyncio.timeout(MEMORY_WRITE_AT_STOP_S):
                await evaluator.write_memories()
        except TimeoutError:
            log.warning(
                "autoscaler: the memory write at stop took over %g s", MEMORY_WRITE_AT_STOP_S
            )
    runtime: AutoscalerRuntime | None = getattr(memo, "autoscaler", None)
    if runtime is not None:
        await runtime.sources.aclose()
