"""A disaggregated service's evaluations: the autoscaler once per pool, each on its own signal.

    spec.disaggregation.<role>.replicas, conditions and the      [the round's listing]
    Ready engine pods, split by their pool label
    each pool's policy at the batching its engines run, for the   [core, pure:
    mix the pools are sized for                                    core.disaggregation_plan]
    step(state, samples, current, now) per pool                   [core.autoscale.loop]
    carries out each pool's actions: its replicas (a merge patch  [runtime.writer]
    of that field), the Events, its status (status.phases.<role>
    and its conditions, under a field manager of its own)

The prefill pool answers to the TTFT left after the KV hand-off on prompt tokens, the decode
pool to the ITL on running decodes (core.disaggregation.phase_policies): the same rules as an
aggregated service's. The mix starts as the spec's hints (or the tuner's defaults) and follows
the decode pool's learned workload once it moves materially (PhaseWorkload.replanned); the
decode engines see every request's whole prompt and output. The pools are read from their pods
directly (the API refuses another metrics source for a split service).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.metrics import PodEndpoint, ServiceTarget
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.loop import (
    Action,
    ServiceState,
    step,
    unusable_spec,
)
from tokenpilot.core.autoscale.memory import InvalidMemory, restore, snapshot
from tokenpilot.core.autoscale.observation import Current
from tokenpilot.core.autoscale.report import phase_conditions
from tokenpilot.core.autoscale.spec import evaluation_interval_s
from tokenpilot.core.disaggregation import PhaseWorkload
from tokenpilot.core.disaggregation_plan import (
    ROLES,
    phase_scaling,
    phase_verdict,
    running_workload,
)
from tokenpilot.core.errors import InvalidSpec, TokenPilotError
from tokenpilot.runtime.service_loop import FALLBACK_INTERVAL_S, AutoscalerRuntime
from tokenpilot.runtime.writer import Writer

log = logging.getLogger("tokenpilot.autoscaler")


@dataclass
class PhasesLoop:
    """One disaggregated service's evaluations: a `ServiceState` per pool, and the mix the pools
    are sized for. Nothing else is remembered here."""

    runtime: AutoscalerRuntime
    client: KubeClient
    namespace: str
    name: str
    profile_of: Callable[[str], GPUProfile] | None = None
    states: dict[str, ServiceState] = field(default_factory=dict)
    workload: PhaseWorkload | None = None
    # What an earlier process remembered of each pool, restored at the first evaluation.
    memory: Mapping[str, Any] | None = None
    _writers: dict[str, Writer] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._writers = {
            role: Writer(self.client, self.namespace, self.name, self.runtime.clock, role)
            for role in ROLES
        }

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    async def evaluate(self, body: Mapping[str, Any], pods: tuple[PodEndpoint, ...]) -> float:
        """One evaluation of both pools as `body` and `pods` show them; the seconds to wait."""
        try:
            service = LLMService.model_validate(dict(body))
            policies, labels = self._policies(service)
            interval_s = evaluation_interval_s(service.spec)
        except (ValidationError, TokenPilotError) as error:
            # The user must fix the spec (or the profiles); keep each pool's replicas, say so.
            split = (body.get("spec") or {}).get("disaggregation") or {}
            for role in ROLES:
                replicas = int((split.get(role) or {}).get("replicas", 1))  # the API default
                state = self.states.get(role) or ServiceState(AutoscalePolicy())
                now = self.runtime.now()
                self.states[role], actions = unusable_spec(state, replicas, str(error), now)
                await self._carry_out(role, None, actions, previous=state)
            return FALLBACK_INTERVAL_S
        split = service.spec.disaggregation
        assert split is not None
        for role, pool, policy, label in zip(ROLES, split.pools, policies, labels, strict=True):
            started_s = self.runtime.clock.monotonic_s()
            mine = tuple(pod for pod in pods if pod.pool == label)
            state = self._state(role, policy, interval_s)
            target = ServiceTarget(
                self.namespace,
                self.name,
                pool.replicas,
                len(mine),
                mine,
                read_ttft=policy.ttft_p99_slo_s is not None,
            )
            samples = await self.runtime.sources.for_spec(service.spec.autoscaling.metrics).read(
                target, self.runtime.clock.monotonic_s()
            )
            current = Current(
                pool.replicas,
                len(mine),
                service.metadata.generation,
                phase_conditions(role, service.status.conditions),
                {pod.name: pod.startup_s for pod in mine if pod.startup_s is not None},
            )
            self.states[role], decision, actions = step(state, samples, current, self.runtime.now())
            await self._carry_out(role, service, actions, previous=state)
            model = policy.replica_model
            self.runtime.metrics.record_pool_decision(
                self.namespace,
                self.name,
                role,
                decision,
                None if model is None else model.token_budget,
            )
            self.runtime.metrics.evaluation_s.observe(self.runtime.clock.monotonic_s() - started_s)
            log.debug("%s/%s %s: %s", *self.key, role, decision.reason)
        return interval_s

    def _policies(
        self, service: LLMService
    ) -> tuple[tuple[AutoscalePolicy, AutoscalePolicy], tuple[str, str]]:
        if service.spec.disaggregation is None:
            raise InvalidSpec("spec.disaggregation is gone; the service is scaled as one pool")
        if self.profile_of is None:
            raise InvalidSpec("no GPU profiles to size the pools with")
        planned = self.workload or running_workload(service)
        decode = self.states.get("decode")
        self.workload = planned.replanned(None if decode is None else decode.workload.learned())
        scaling = phase_scaling(service, by_name=self.profile_of, workload=self.workload)
        return scaling.policies, scaling.labels

    def _split_said(self, role: str, service: LLMService | None) -> dict[str, Any] | None:
        """Whether the split pays for the mix the pools are sized for, as the decode pool's
        writer (which holds that mix) says it; None for the prefill pool's."""
        if role != "decode" or service is None or self.workload is None:
            return None
        if self.profile_of is None:
            return None
        try:
            told = phase_verdict(service, by_name=self.profile_of, workload=self.workload)
        except TokenPilotError as error:
            return {"verdict": f"not priced: {error}"}
        return {"splitPays": told.pays, "verdict": told.words}

    def _state(self, role: str, policy: AutoscalePolicy, interval_s: float) -> ServiceState:
        state = self.states.get(role)
        if state is not None:
            return replace(state, policy=policy, interval_s=interval_s)
        fresh = ServiceState(policy, interval_s=interval_s)
        remembered = (self.memory or {}).get(role)
        if remembered is None:
            return fresh
        try:
            return restore(fresh, remembered, self.runtime.now())
        except InvalidMemory as error:
            log.warning("%s/%s %s: memory unreadable (%s); afresh", *self.key, role, error)
            return fresh

    async def release(self) -> None:
        """The service is no longer split: give up each pool's status and series."""
        for writer in self._writers.values():
            await writer.release()
        self.runtime.metrics.forget_pools(self.namespace, self.name)

    def memory_now(self) -> dict[str, Any] | None:
        """What to keep of each pool for a later process."""
        now = self.runtime.now()
        kept = {role: snapshot(state, now) for role, state in self.states.items()}
        for role, remembered in (self.memory or {}).items():
            kept.setdefault(role, remembered)
        return kept or None

    async def _carry_out(
        self,
        role: str,
        service: LLMService | None,
        actions: Sequence[Action],
        *,
        previous: ServiceState,
    ) -> None:
        """One pool's actions in order (runtime.writer); a status that was not applied is not
        remembered as applied."""
        uid = None if service is None else service.metadata.uid
        done = await self._writers[role].carry_out(
            actions, uid, split=lambda: self._split_said(role, service)
        )
        state = self.states.get(role)
        if not done and state is not None:
            self.states[role] = replace(
                state, applied=previous.applied, applied_at_s=previous.applied_at_s
            )
