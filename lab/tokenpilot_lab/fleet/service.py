"""The LLMService an operator contender runs, reconciled in virtual time through the operator's
own functions.

In a cluster the reconciler tunes the budget when the service is created (from its spec: the
hints it gives, or the API's defaults) and again at every resync, from what the autoscaler
published in status (the workload the engines served, their costs, the scaling it is doing):
`core.render_plan.tuned`, gated by `core.retune`. `ServiceTuning` does the same here: one
`LLMService` (the spec a user would write), its status built from what the autoscaler applied
and the reconciler's own tuning, and a `Progressing` condition while a rollout runs. When the
tuner moves the engines, the simulator rolls them (fleet.simulator) and the autoscaler's
capacity model keeps pricing the batching most Ready pods run (core.autoscale.spec).

Nothing here reads the trace or the engines' timer: the spec and the GPU profile are what the
operator holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import (
    ConditionStatus,
    LLMService,
    LLMServiceStatus,
)
from tokenpilot.core import conditions as cond
from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.spec import policy_from_spec, replica_model, running_batching
from tokenpilot.core.plan_inputs import PlanInputs, plan_inputs
from tokenpilot.core.render_plan import tuned
from tokenpilot.core.retune import Tuning
from tokenpilot.core.status import tuning_status

# The operator's default --resync-interval: how often the reconciler re-plans every service.
RESYNC_S = 60.0


@dataclass(frozen=True, slots=True)
class Retune:
    """One re-tune the reconciler made: when, from and to (token budget, max_num_seqs), why."""

    at_s: float
    from_batching: tuple[int, int]
    to_batching: tuple[int, int]
    why: str


def rollout_conditions(rolling_out: bool) -> list[dict[str, Any]]:
    """The Progressing condition the reconciler sets while a new pod template rolls out (the
    only condition a re-tune's gate reads), or none."""
    if not rolling_out:
        return []
    return [
        {
            "type": cond.PROGRESSING,
            "status": ConditionStatus.true.value,
            "reason": "RollingOut",
            "message": "a new pod template is rolling out",
            "lastTransitionTime": "1970-01-01T00:00:00Z",
        }
    ]


def retunes_report(retunes: list[Retune]) -> list[dict[str, object]]:
    """Each re-tune as a run's report gives it."""
    return [
        {
            "at_s": round(r.at_s, 3),
            "from": list(r.from_batching),
            "to": list(r.to_batching),
            "why": r.why,
        }
        for r in retunes
    ]


@dataclass
class ServiceTuning:
    """One service's spec and the reconciler's tuning of it over a run; see the module
    docstring. Build with `ServiceTuning.of`."""

    service: LLMService
    profile: GPUProfile
    inputs: PlanInputs
    tuning: Tuning
    resync_s: float = RESYNC_S
    retunes: list[Retune] = field(default_factory=list)
    _next_resync_s: float = 0.0
    _policies: dict[tuple[int, int], AutoscalePolicy] = field(default_factory=dict)

    @staticmethod
    def of(service: LLMService, profile: GPUProfile) -> ServiceTuning:
        """The service as created: tuned from its spec alone, as the reconciler's first plan
        is (no workload observed yet)."""
        inputs = plan_inputs(service.spec, profile)
        return ServiceTuning(service, profile, inputs, tuned(service, inputs, None))

    @property
    def batching(self) -> tuple[int, int]:
        """What the Deployment's template runs: (token budget, max_num_seqs)."""
        decision = self.tuning.decision
        return decision.token_budget, decision.max_num_seqs

    def policy(self, pods_batching: Iterable[tuple[int, int] | None]) -> AutoscalePolicy:
        """The autoscaler's policy for the spec, its capacity model at the batching most of
        the Ready pods run (the template's before any is Ready), as the operator's is."""
        batching = running_batching(pods_batching) or self.batching
        policy = self._policies.get(batching)
        if policy is None:
            model = replica_model(self.inputs, *batching)
            policy = self._policies[batching] = policy_from_spec(self.service.spec, model)
        return policy

    def reconcile(
        self,
        now_s: float,
        wall: str,
        applied: Mapping[str, Any] | None,
        *,
        rolling_out: bool,
    ) -> tuple[int, int] | None:
        """A resync, when one is due: the tuning for the status as it stands; the batching to
        roll the engines to when it re-tunes them, else None."""
        if now_s < self._next_resync_s:
            return None
        self._next_resync_s = now_s + self.resync_s
        before = self.batching
        self.tuning = tuned(self._observed(applied, rolling_out), self.inputs, wall)
        if self.tuning.retuned is None:
            return None
        self.retunes.append(Retune(now_s, before, self.batching, self.tuning.retuned))
        return self.batching

    def _observed(self, applied: Mapping[str, Any] | None, rolling_out: bool) -> LLMService:
        """The service as the reconciler reads it: what the autoscaler applied to status, the
        reconciler's tuning, and Progressing while a rollout runs."""
        owned = dict(applied or {})
        conditions = [c for c in owned.get("conditions", ()) if c.get("type") != cond.PROGRESSING]
        owned["conditions"] = conditions + rollout_conditions(rolling_out)
        owned["tuning"] = tuning_status(self.tuning, self.profile.name).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        status = LLMServiceStatus.model_validate(owned)
        return self.service.model_copy(update={"status": status})

    def report(self) -> dict[str, Any]:
        """What the run's report says of this service: the hints it was given, the budget it
        opened and ends on, what it learned, and each re-tune."""
        tuning = self.tuning
        hints = self.service.spec.workload
        planned = tuning.planned_for
        recommendation = tuning.recommendation
        return {
            "hints": None
            if hints is None
            else hints.model_dump(by_alias=True, mode="json", exclude_none=True),
            "basis": tuning.basis.value,
            "batching": list(self.batching),
            "planned_for": None
            if planned is None
            else planned.model_dump(by_alias=True, mode="json", exclude_none=True),
            "recommendation": None
            if recommendation is None
            else recommendation.model_dump(by_alias=True, mode="json", exclude_none=True),
            "retunes": retunes_report(self.retunes),
        }
