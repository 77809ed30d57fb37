"""The Events an LLMService gets, as data: the kube adapter posts them (adapters/kube/events.py).

The reconciler's, from what one reconcile applied and how its status changed:
  Applied / DriftCorrected   objects were written (the first tuning rides on the first apply)
  Phase<Phase>               the phase changed (a Warning for Infeasible and Degraded); an
                             Infeasible one carries the refusal's longer reasons
  <Reason>                   Degraded for a new reason (CrashLoopBackOff to OOMKilled, say):
                             a Warning named for it
  Tuned                      status.tuning changed
Each comes from a change of status, never from a pass that changed nothing, so a crash loop
that goes on for an hour is one Event, not one per resync.
The autoscaler's, from one decision: its reason code when the replicas move, and a Warning
when it goes blind (missing, stale or partial metrics) for a new reason; and from what the
engines showed of the step model, a Warning when they are found slower than their profile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.llmservice import ConditionStatus, Phase, TuningStatus
from tokenpilot.core.autoscale import Decision
from tokenpilot.core.autoscale.correction import EnginePace
from tokenpilot.core.autoscale.decision import BLIND

# Triggers that carry a spec the user wrote; the others correct drift.
SPEC_TRIGGERS = ("create", "update", "resume")


@dataclass(frozen=True, slots=True)
class ServiceEvent:
    reason: str
    message: str
    warning: bool = False


def tuned_message(tuning: TuningStatus) -> str:
    """status.tuning in one line."""
    return (
        f"{tuning.sku}: maxNumBatchedTokens {tuning.max_num_batched_tokens}, maxNumSeqs "
        f"{tuning.max_num_seqs} ({tuning.source.value}, set by {tuning.set_by.kind.value}): "
        f"{tuning.reason}"
    )


def _ready_reason(status: Mapping[str, Any]) -> str | None:
    conditions = status.get("conditions") or []
    return next((c.get("reason") for c in conditions if c["type"] == "Ready"), None)


def reconcile_events(
    trigger: str,
    applied: Sequence[str],
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    detail: str | None = None,
) -> list[ServiceEvent]:
    """What one reconcile tells the user; `before` and `after` are the reconciler's status,
    `detail` the longer reasons of a refused spec."""
    events = []
    old_tuning, new_tuning = before.get("tuning"), after.get("tuning")
    tuned = None
    if new_tuning and old_tuning != new_tuning:
        tuned = tuned_message(TuningStatus.model_validate(new_tuning))
    if applied:
        reason = "Applied" if trigger in SPEC_TRIGGERS else "DriftCorrected"
        message = f"{trigger}: applied " + "; ".join(applied)
        if tuned and old_tuning is None:
            # The first tuning rides on the first apply: one Event, not two, per new service.
            message, tuned = f"{message}; tuned {tuned}", None
        events.append(ServiceEvent(reason, message))
    if before.get("phase") != after.get("phase"):
        phase = after.get("phase")
        conditions = after.get("conditions", [])
        message = next((c["message"] for c in conditions if c["type"] == phase), "") or next(
            (c["message"] for c in conditions if c["type"] == "Ready"), ""
        )
        if phase == Phase.Infeasible and detail:
            message = f"{message} ({detail})"
        events.append(
            ServiceEvent(
                f"Phase{phase}",
                f"phase {before.get('phase')} -> {phase}: {message}",
                warning=phase in (Phase.Infeasible, Phase.Degraded),
            )
        )
    elif after.get("phase") == Phase.Degraded and _ready_reason(before) != _ready_reason(after):
        reason = _ready_reason(after) or "Degraded"
        conditions = after.get("conditions", [])
        message = next((c["message"] for c in conditions if c["type"] == "Degraded"), "")
        events.append(ServiceEvent(reason, message, warning=True))
    if tuned:
        events.append(ServiceEvent("Tuned", tuned))
    return events


def scale_event(
    current_replicas: int, decision: Decision, previous_reason_code: str | None
) -> ServiceEvent | None:
    """The autoscaler's Event for one decision, if it has one: the replicas moved, or the
    autoscaler went blind (in a way the user can fix) for a reason other than the previous
    decision's."""
    changed = decision.desired_replicas != current_replicas
    blindness = BLIND.get(decision.reason_code)
    entering_blind = (
        blindness is not None
        and blindness.warns
        and previous_reason_code != decision.reason_code.value
    )
    if not (changed or entering_blind):
        return None
    return ServiceEvent(
        decision.reason_code.value,
        f"{current_replicas} -> {decision.desired_replicas}: {decision.reason}",
        warning=entering_blind,
    )


def pace_event(previous_reason: str | None, pace: EnginePace) -> ServiceEvent | None:
    """A Warning when the engines are newly found slower than their profile, or slower in a
    new way (`BudgetBreaksItl` after `SlowerThanProfile`): once per reason, never per
    evaluation."""
    if pace.status is not ConditionStatus.false or pace.reason == previous_reason:
        return None
    return ServiceEvent(pace.reason, pace.message, warning=True)
