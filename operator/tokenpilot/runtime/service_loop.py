"""One autoscaled service's evaluations: read, `step`, carry out the actions.

    spec.replicas (the scale subresource's) and conditions        [the round's listing]
    and the Ready engine pods
    reads the pods' metrics through the service's source          [metrics adapter]
    step(state, samples, current, now) -> state, decision,        [core, pure:
        actions                                                    core.autoscale.loop]
    carries out the actions: spec.replicas through the scale      [runtime.writer]
    subresource, the Events, the status the autoscaler owns
    exports the decision, the bounds, the SLO targets and the replica's hourly cost

An API error stops the evaluation's remaining actions; the next interval is the retry, and a
status that was not applied is not remembered as applied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from tokenpilot.adapters.clock import SYSTEM_CLOCK, Clock
from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.metrics import MetricsSources, PodEndpoint, ServiceTarget
from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.autoscale import AutoscalePolicy, Decision
from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.autoscale.loop import (
    Action,
    ServiceState,
    step,
    unusable_spec,
)
from tokenpilot.core.autoscale.memory import InvalidMemory, restore, snapshot
from tokenpilot.core.autoscale.observation import Current, Now
from tokenpilot.core.autoscale.spec import (
    evaluation_interval_s,
    policy_from_spec,
    replica_model,
    running_batching,
)
from tokenpilot.core.errors import InvalidSpec, TokenPilotError
from tokenpilot.core.plan_inputs import plan_inputs
from tokenpilot.core.pool_plan import equal_share
from tokenpilot.core.pools import ready_in_first_pool_units
from tokenpilot.core.render import pool_label_value
from tokenpilot.runtime.writer import Writer

log = logging.getLogger("tokenpilot.autoscaler")

# Used when the spec cannot be read at all: how soon to look again.
FALLBACK_INTERVAL_S = 5.0


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

    def now(self) -> Now:
        return Now(self.clock.monotonic_s(), self.clock.now_rfc3339())


@dataclass
class ServiceLoop:
    """One service's evaluations. `state` is the pure state machine's
    (tokenpilot.core.autoscale.loop); nothing else is remembered here."""

    runtime: AutoscalerRuntime
    client: KubeClient
    namespace: str
    name: str
    profile_of: Callable[[str], GPUProfile] | None = None
    state: ServiceState | None = None
    # What an earlier process remembered of the service, restored at the first evaluation.
    memory: Mapping[str, Any] | None = None
    # The replica model, with what it was planned from: (generation, budget, seqs), profile.
    _model: tuple[tuple[int, int, int], GPUProfile, ReplicaModel] | None = field(
        default=None, init=False, repr=False
    )
    # The last body read, by its resourceVersion: an unchanged object is not validated again.
    _read: tuple[str, LLMService] | None = field(default=None, init=False, repr=False)
    writer: Writer = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.writer = Writer(self.client, self.namespace, self.name, self.runtime.clock)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    async def evaluate(self, body: Mapping[str, Any], pods: tuple[PodEndpoint, ...]) -> float:
        """One evaluation of the service as `body` (its listing) and `pods` (its Ready engine
        pods, listed in the same round) show it; returns the seconds to wait before the next."""
        clock = self.runtime.clock
        started_s = clock.monotonic_s()
        try:
            service = self._service(body)
            policy = policy_from_spec(service.spec, self._replica_model(service, pods))
            interval_s = evaluation_interval_s(service.spec)
        except (ValidationError, InvalidSpec) as error:
            # The user must fix the spec; keep the replicas and say so in status.
            replicas = int(body.get("spec", {}).get("replicas", 0))
            state = self.state or ServiceState(AutoscalePolicy())
            self.state, actions = unusable_spec(state, replicas, str(error), self.runtime.now())
            await self._carry_out(None, actions, previous=state)
            return FALLBACK_INTERVAL_S
        state = (
            self._first_state(ServiceState(policy, interval_s=interval_s))
            if self.state is None
            else replace(self.state, policy=policy, interval_s=interval_s)
        )
        # The scale subresource's spec.replicas is the listed object's own spec.replicas.
        spec_replicas = service.spec.replicas
        target = ServiceTarget(
            self.namespace,
            self.name,
            spec_replicas,
            len(pods),
            pods,
            read_ttft=policy.ttft_p99_slo_s is not None,
        )
        source = self.runtime.sources.for_spec(service.spec.autoscaling.metrics)
        samples = await source.read(target, clock.monotonic_s())
        current = Current(
            spec_replicas,
            ready_replicas(service, pods),
            service.metadata.generation,
            tuple(service.status.conditions),
            {pod.name: pod.startup_s for pod in pods if pod.startup_s is not None},
        )
        self.state, decision, actions = step(state, samples, current, self.runtime.now())
        await self._carry_out(service, actions, previous=state)
        self._export(service, policy, decision, clock.monotonic_s() - started_s)
        return interval_s

    def _service(self, body: Mapping[str, Any]) -> LLMService:
        """`body` read as an LLMService; the last reading when its resourceVersion is the same
        (most evaluations: the status is written only when a reader would notice)."""
        version = str(body.get("metadata", {}).get("resourceVersion") or "")
        if version and self._read is not None and self._read[0] == version:
            return self._read[1]
        service = LLMService.model_validate(dict(body))
        self._read = (version, service) if version else None
        return service

    def _first_state(self, fresh: ServiceState) -> ServiceState:
        """`fresh`, with the memory an earlier process wrote where there is one."""
        memory, self.memory = self.memory, None
        if memory is None:
            return fresh
        try:
            restored = restore(fresh, memory, self.runtime.now())
        except InvalidMemory as error:
            log.warning("%s/%s: memory unreadable (%s); starting afresh", *self.key, error)
            return fresh
        outlook = restored.demand.outlook
        log.info(
            "%s/%s: resumed the memory of an earlier process: %.0f s of load, %d jumps",
            *self.key,
            0.0 if outlook is None else outlook.span_s,
            len(restored.demand.jumps),
        )
        return restored

    async def release(self) -> None:
        """The service is now split into pools: give up the status this loop wrote."""
        await self.writer.release()

    def memory_now(self) -> dict[str, Any] | None:
        """What to keep of this service for a later process: its memory now, or the one it
        was handed and has not yet restored."""
        if self.memory is not None:
            return dict(self.memory)
        if self.state is None:
            return None
        return snapshot(self.state, self.runtime.now())

    def _replica_model(
        self, service: LLMService, pods: Sequence[PodEndpoint]
    ) -> ReplicaModel | None:
        # With GPU pools the model is the first pool's (status.tuning), and so are the pods
        # whose batching it is priced at.
        if service.status.pools:
            first = pool_label_value(service.status.pools[0].sku)
            pods = [p for p in pods if p.pool == first]
        """One replica as the step model prices it, at the batching the engines run (that of
        most Ready pods; during a re-tune's rollout the budget coming is not yet theirs), once
        the reconciler has tuned it; planned again only when the spec, the batching or the GPU's
        profile changes."""
        tuning = service.status.tuning
        if tuning is None or self.profile_of is None:
            return None
        budget, seqs = running_batching(pod.batching for pod in pods) or (
            tuning.max_num_batched_tokens,
            tuning.max_num_seqs,
        )
        try:
            profile = self.profile_of(tuning.sku)
            key = (service.metadata.generation, budget, seqs)
            if self._model is None or self._model[0] != key or self._model[1] is not profile:
                model = replica_model(plan_inputs(service.spec, profile), budget, seqs)
                self._model = (key, profile, model)
            return self._model[2]
        except TokenPilotError as error:
            # A SKU the catalog no longer knows or a spec that no longer fits: the SLO
            # signals alone still scale it.
            log.info("%s/%s: no capacity model: %s", *self.key, error)
            return None

    async def _carry_out(
        self, service: LLMService | None, actions: Sequence[Action], *, previous: ServiceState
    ) -> None:
        """The actions in order (runtime.writer); a status that was not applied is not
        remembered as applied."""
        uid = None if service is None else service.metadata.uid
        if not await self.writer.carry_out(actions, uid) and self.state is not None:
            self.state = replace(
                self.state, applied=previous.applied, applied_at_s=previous.applied_at_s
            )

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
        metrics.record_pace(
            self.namespace, self.name, None if self.state is None else self.state.pace.pace
        )
        outlook = None if self.state is None else self.state.demand.outlook
        metrics.record_forecast_memory(
            self.namespace, self.name, 0.0 if outlook is None else outlook.span_s
        )
        metrics.record_workload(
            self.namespace,
            self.name,
            None if self.state is None else self.state.workload.learned(),
            None if tuning is None else tuning.recommendation,
        )

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


def ready_replicas(service: LLMService, pods: Sequence[PodEndpoint]) -> int:
    """The Ready pods as spec.replicas counts them: pods, or with GPU pools, replicas of the
    first pool's capacity (core.pools)."""
    pools = service.status.pools
    if not pools:
        return len(pods)
    rates = [(pool_label_value(p.sku), p.requests_per_s_per_replica) for p in pools]
    return ready_in_first_pool_units(
        [pod.pool for pod in pods], rates, equal_share=equal_share(service)
    )
