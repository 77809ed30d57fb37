"""The LLMService status the operator should report, from the Deployment and its pods.

Readiness is judged as `kubectl rollout status` judges a Deployment, then by the pods: a chain
of small pure checks tried in order; the first that speaks sets the phase:
  infeasible   planning refused the spec                          -> Infeasible
  missing      no Deployment yet                                  -> Pending
  failing      engine pods cannot run: CrashLoopBackOff, OOMKilled,
               Unschedulable, ImagePullBackOff, a missing Secret
               (core/pod_health.py names the cause and the fix)   -> Degraded
  stalled      the rollout exceeded its progress deadline         -> Degraded
  rolling      the Deployment has not caught up with its spec:
               generation not observed, fewer updated replicas
               than asked, old replicas left, updated ones not
               yet available                                      -> Progressing
  short        fewer ready replicas than asked                    -> Progressing
  ready        all of the above match the spec                    -> Ready
Ready and the condition of the phase carry the reason and one sentence; the others say only
their reason, so a message is never repeated across four conditions. The reconciler's status
excludes `autoscaling` and the MetricsAvailable condition, which belong to the autoscaler:
each writer applies only what it owns (adapters/kube/status.py).

status.tuning is the batching decision as the API publishes it (`tuning_status`).

What the autoscaler owns in status (`autoscaling`, `phases`, MetricsAvailable, PaceAsProfiled
and their per-pool names) is its own
(core.autoscale.report).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.llmservice import (
    BudgetBound,
    ConditionStatus,
    LLMService,
    LLMServiceStatus,
    Phase,
    PoolStatus,
    TuningStatus,
)
from tokenpilot.core import conditions as cond
from tokenpilot.core.batching import Bound
from tokenpilot.core.pod_health import PodFailure, verdict
from tokenpilot.core.pools import summary
from tokenpilot.core.render import endpoint, selector_string
from tokenpilot.core.retune import Tuning
from tokenpilot.core.routing import RoutedCondition


@dataclass(frozen=True)
class DeploymentFacts:
    """The parts of a Deployment's spec and status that decide the service's."""

    generation: int
    observed_generation: int
    desired_replicas: int
    replicas: int
    ready_replicas: int
    updated_replicas: int
    available_replicas: int = 0
    progress_deadline_exceeded: bool = False

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> DeploymentFacts:
        status = obj.get("status") or {}
        progressing: dict[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), {}
        )
        return cls(
            generation=int(obj.get("metadata", {}).get("generation", 0)),
            observed_generation=int(status.get("observedGeneration", 0)),
            desired_replicas=int(obj.get("spec", {}).get("replicas", 1)),
            replicas=int(status.get("replicas", 0)),
            ready_replicas=int(status.get("readyReplicas", 0)),
            updated_replicas=int(status.get("updatedReplicas", 0)),
            available_replicas=int(status.get("availableReplicas", 0)),
            progress_deadline_exceeded=progressing.get("reason") == "ProgressDeadlineExceeded",
        )

    @classmethod
    def combined(cls, parts: Sequence[DeploymentFacts]) -> DeploymentFacts:
        """Several pools' Deployments read as one: counts summed, rolled out when all are,
        stalled when any is."""
        seen = all(p.observed_generation >= p.generation for p in parts)
        return cls(
            generation=1,
            observed_generation=1 if seen else 0,
            desired_replicas=sum(p.desired_replicas for p in parts),
            replicas=sum(p.replicas for p in parts),
            ready_replicas=sum(p.ready_replicas for p in parts),
            updated_replicas=sum(p.updated_replicas for p in parts),
            available_replicas=sum(p.available_replicas for p in parts),
            progress_deadline_exceeded=any(p.progress_deadline_exceeded for p in parts),
        )

    @property
    def rolled_out(self) -> bool:
        """What `kubectl rollout status` waits for: the controller has seen this generation,
        every replica runs the current template, no old one is left, and all are available."""
        want = self.desired_replicas
        return (
            self.observed_generation >= self.generation
            and self.updated_replicas == want
            and self.replicas == want
            and self.available_replicas == want
        )

    @property
    def settled(self) -> bool:
        """Rolled out with every replica ready: the pods need not be looked at."""
        return self.rolled_out and self.ready_replicas == self.desired_replicas


@dataclass(frozen=True)
class Readiness:
    """The first readiness check that spoke: the phase, a CamelCase reason and words."""

    phase: Phase
    reason: str
    message: str


def _rollout_words(d: DeploymentFacts) -> str:
    want = d.desired_replicas
    if d.observed_generation < d.generation:
        return f"the Deployment controller has not yet seen generation {d.generation}"
    if d.updated_replicas < want:
        return f"{d.updated_replicas} of {want} replicas updated, {d.ready_replicas} ready"
    if d.replicas > want:
        old = d.replicas - d.updated_replicas
        return f"{want} of {want} replicas updated, {old} old replica(s) pending termination"
    return f"{want} of {want} replicas updated, {d.available_replicas} available"


def _readiness(
    service: LLMService,
    deployment: DeploymentFacts | None,
    problem: str | None,
    failures: Sequence[PodFailure],
    num_pods: int,
) -> Readiness:
    name = service.metadata.name
    if problem is not None:
        return Readiness(Phase.Infeasible, "Infeasible", problem)
    if deployment is None:
        return Readiness(Phase.Pending, "DeploymentMissing", f"creating Deployment {name}")
    d = deployment
    if failures:
        found = verdict(service, failures, num_pods)
        return Readiness(Phase.Degraded, found.reason, found.message)
    if d.progress_deadline_exceeded:
        return Readiness(
            Phase.Degraded,
            "ProgressDeadlineExceeded",
            f"the rollout of Deployment {name} made no progress within its deadline; see "
            f"kubectl describe deployment {name} and its pods",
        )
    if not d.rolled_out:
        return Readiness(Phase.Progressing, "RollingOut", _rollout_words(d))
    if d.ready_replicas < d.desired_replicas:
        return Readiness(
            Phase.Progressing,
            "ReplicasStarting",
            f"{d.ready_replicas} of {d.desired_replicas} replicas ready",
        )
    return Readiness(
        Phase.Ready, "ReplicasReady", f"{d.ready_replicas} of {d.desired_replicas} replicas ready"
    )


def desired_status(
    service: LLMService,
    *,
    deployment: DeploymentFacts | None,
    sku_name: str | None,
    tuning: Tuning | None,
    problem: str | None,
    now: str,
    pod_failures: Sequence[PodFailure] = (),
    num_pods: int = 0,
    pools: Sequence[PoolStatus] = (),
    routed: RoutedCondition | None = None,
    routing_read: bool = True,
) -> dict[str, Any]:
    """The status fields the reconciler owns, as the JSON to merge into .status.

    `problem` is the message of a domain error (the spec is Infeasible or invalid);
    `pod_failures` are the engine pods that cannot run, out of `num_pods`; `now` is used only
    for conditions whose status flips. `routed` is the Routed condition of spec.routing (None:
    routing off, the condition removed); where this reconcile did not read the InferencePool
    (`routing_read` False) the condition stays as it was.
    """
    current = service.status
    generation = service.metadata.generation
    readiness = _readiness(service, deployment, problem, pod_failures, num_pods)
    conditions = [c for c in current.conditions if c.type in cond.RECONCILER_TYPES]

    def put(type_: str, on: bool, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = cond.set_condition(
            conditions,
            type_=type_,
            status=ConditionStatus.true if on else ConditionStatus.false,
            reason=reason,
            message=message,
            observed_generation=generation,
            now=now,
        )

    if service.spec.routing.inference_pool is None:
        conditions = [c for c in conditions if c.type != cond.ROUTED]
    elif routed is not None and routing_read:
        conditions = cond.set_condition(
            conditions,
            type_=cond.ROUTED,
            status=routed.status,
            reason=routed.reason,
            message=routed.message,
            observed_generation=generation,
            now=now,
        )
    phase = readiness.phase

    def words(on: bool) -> str:
        # Ready and the condition of the phase say why; the others give only their reason.
        return readiness.message if on else ""

    put(cond.READY, phase is Phase.Ready, readiness.reason, readiness.message)
    progressing, degraded = phase is Phase.Progressing, phase is Phase.Degraded
    put(cond.PROGRESSING, progressing, readiness.reason, words(progressing))
    put(cond.DEGRADED, degraded, readiness.reason, words(degraded))
    put(
        cond.INFEASIBLE,
        phase is Phase.Infeasible,
        "Infeasible" if problem else "Feasible",
        problem or "the spec can run on this cluster",
    )
    published = tuning_status(tuning, sku_name) if tuning and sku_name else None
    status = LLMServiceStatus(
        observed_generation=generation,
        phase=phase,
        replicas=deployment.replicas if deployment else 0,
        ready_replicas=deployment.ready_replicas if deployment else 0,
        selector=selector_string(service),
        endpoint=endpoint(service),
        conditions=conditions,
        tuning=published,
        pools=list(pools) or None,
        pools_summary=summary(
            [
                (p.sku if p.role is None else f"{p.role} {p.sku}", p.ready_replicas, p.replicas)
                for p in pools
            ]
        )
        or None,
    )
    return _reconciler_part(status)


def tuning_status(tuning: Tuning, sku_name: str) -> TuningStatus:
    """status.tuning: the batching decision as the API publishes it, with what it was planned
    for and the re-tune it waits for, if any."""
    batching = tuning.decision
    lower, upper = batching.lower, batching.upper
    return TuningStatus(
        sku=sku_name,
        max_num_batched_tokens=batching.token_budget,
        max_num_seqs=batching.max_num_seqs,
        source=batching.source,
        set_by=_budget_bound(batching.set_by),
        max_num_seqs_source=batching.max_num_seqs_source,
        lower_bound=None if lower is None else _budget_bound(lower),
        upper_bound=None if upper is None else _budget_bound(upper),
        feasible=batching.feasible,
        reason=batching.reason,
        basis=tuning.basis,
        planned_for=tuning.planned_for,
        retuned_at=tuning.retuned_at,
        recommendation=tuning.recommendation,
    )


def _budget_bound(bound: Bound) -> BudgetBound:
    return BudgetBound(kind=bound.kind, tokens=bound.tokens)


def owned_status(service: LLMService) -> dict[str, Any]:
    """The reconciler-owned part of the current status, shaped like `desired_status`."""
    return _reconciler_part(service.status)


def _reconciler_part(status: LLMServiceStatus) -> dict[str, Any]:
    # Absent, not null: in an apply, a field left out is a field given up.
    own = [c for c in status.conditions if c.type in cond.RECONCILER_TYPES]
    return status.model_copy(update={"conditions": own}).model_dump(
        by_alias=True,
        mode="json",
        # The autoscaler's and the calibration writer's: each writer applies only what it owns.
        exclude={"autoscaling", "calibration", "workload", "engine_costs", "phases"},
        exclude_none=True,
    )
