"""The reconciler's Events, as data (core.service_event); the kube adapter posts them.

From what one reconcile applied and how its status changed:
  Applied / DriftCorrected   objects were written (the first tuning rides on the first apply)
  Phase<Phase>               the phase changed (a Warning for Infeasible and Degraded); an
                             Infeasible one carries the refusal's longer reasons
  <Reason>                   Degraded for a new reason (CrashLoopBackOff to OOMKilled, say):
                             a Warning named for it
  Tuned                      status.tuning changed
Each comes from a change of status, never from a pass that changed nothing, so a crash loop
that goes on for an hour is one Event, not one per resync. The autoscaler's Events are its own
(core.autoscale.report).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokenpilot.api.llmservice import Phase, TuningStatus
from tokenpilot.core.service_event import ServiceEvent

# Triggers that carry a spec the user wrote, or (pools) a split of it the clock moved; the
# others correct drift.
SPEC_TRIGGERS = ("create", "update", "resume", "pools")


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
    retuned: str | None = None,
) -> list[ServiceEvent]:
    """What one reconcile tells the user; `before` and `after` are the reconciler's status,
    `detail` the longer reasons of a refused spec, `retuned` the words of a re-tune this
    reconcile made (a `Retuned` Event instead of `Tuned`)."""
    events = []
    old_tuning, new_tuning = before.get("tuning"), after.get("tuning")
    tuned = None
    if new_tuning and _decision(old_tuning) != _decision(new_tuning):
        tuned = tuned_message(TuningStatus.model_validate(new_tuning))
    if applied:
        reason = "Applied" if trigger in SPEC_TRIGGERS or retuned else "DriftCorrected"
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
    if retuned:
        events.append(ServiceEvent("Retuned", retuned))
    elif tuned:
        events.append(ServiceEvent("Tuned", tuned))
    return events


# What status.tuning says of the decision itself; what it was planned for, when it was
# re-tuned and the recommendation it waits for change no engine and post no Tuned Event.
_BOOKKEEPING = ("basis", "plannedFor", "retunedAt", "recommendation")


def _decision(tuning: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if tuning is None:
        return None
    return {key: value for key, value in tuning.items() if key not in _BOOKKEEPING}


def pool_events(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[ServiceEvent]:
    """A pool's spill and its return, each once: `PoolSpilledOver` (a Warning) when a pool
    becomes SpilledOver, `PoolRestored` when a spilled pool serves again; and `PoolsSplit`
    when the replicas per pool change, naming the split."""
    old = {p["sku"]: p for p in before.get("pools") or []}
    new = {p["sku"]: p for p in after.get("pools") or []}
    events = []
    for sku, pool in new.items():
        was = (old.get(sku) or {}).get("state")
        if pool["state"] == "SpilledOver" and was != "SpilledOver":
            events.append(
                ServiceEvent("PoolSpilledOver", f"pool {sku}: {pool['reason']}", warning=True)
            )
        elif was == "SpilledOver" and pool["state"] != "SpilledOver":
            events.append(ServiceEvent("PoolRestored", f"pool {sku}: {pool['reason']}"))
    split_before = {sku: p["replicas"] for sku, p in old.items()}
    split_after = {sku: p["replicas"] for sku, p in new.items()}
    if new and split_before != split_after:
        words = ", ".join(f"{sku} {p['replicas']}" for sku, p in new.items())
        events.append(ServiceEvent("PoolsSplit", f"replicas per pool: {words}"))
    return events
