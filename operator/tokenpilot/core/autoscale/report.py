"""What one evaluation tells the user: the autoscaler's status, its conditions and its Events.

The autoscaler owns, in an LLMService's status, `autoscaling` (the decision: replicas, mode,
reason code and words, and when the outcome last changed) and two conditions:

  MetricsAvailable  False with the hold's reason when it could not see (missing, stale or
                    partial metrics), Unknown while no engine pod is ready or a P99 waits for
                    its second scrape, True otherwise
  PaceAsProfiled    what the engines' steps showed of the step model's price
                    (core.autoscale.correction.engine_pace); only where a capacity model
                    sizes the fleet

Its Events: the decision's reason code when the replicas move; a Warning when it goes blind in
a way the user can fix, for a reason other than the last one; a Warning when the engines are
newly found slower than their profile. Each comes from a change, never from an evaluation that
changed nothing. The reconciler's status and Events are its own (core.status, core.events):
each writer applies only what it owns (adapters/kube/status.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.llmservice import AutoscalingStatus, Condition, ConditionStatus
from tokenpilot.api.workload import EngineCostsStatus, TermCost, TokenFigures, WorkloadStatus
from tokenpilot.core import conditions as cond
from tokenpilot.core.autoscale.correction import EnginePace
from tokenpilot.core.autoscale.costs import EngineCosts, TermEstimate
from tokenpilot.core.autoscale.decision import BLIND, Decision, Mode, Reason
from tokenpilot.core.autoscale.observation import Current, Now
from tokenpilot.core.autoscale.workload import LearnedWorkload
from tokenpilot.core.service_event import ServiceEvent


@dataclass(frozen=True, slots=True)
class Report:
    """One evaluation's Events, in order, and everything the autoscaler owns in status."""

    events: tuple[ServiceEvent, ...]
    owned: dict[str, Any]


def report(
    applied: Mapping[str, Any] | None,
    current: Current,
    decision: Decision,
    *,
    problems: Sequence[str],
    pace: EnginePace | None,
    now: Now,
    workload: LearnedWorkload | None = None,
    costs: EngineCosts | None = None,
    costs_window_s: float = 0.0,
) -> Report:
    """The Events and status of `decision`, from the status the autoscaler `applied` last (or,
    before its first apply, the conditions the cluster shows). `pace` is the PaceAsProfiled
    verdict, None where no capacity model sizes the fleet."""
    previous = (applied or {}).get("autoscaling") or {}
    events = []
    scaled = scale_event(current.spec_replicas, decision, previous.get("reasonCode"))
    if scaled is not None:
        events.append(scaled)
    known = _applied_conditions(applied) or current.conditions
    conditions = [
        metrics_condition(
            known, decision, problems=problems, generation=current.generation, now=now.wall
        )
    ]
    if pace is not None:
        before = cond.find(known, cond.PACE_AS_PROFILED)
        conditions.append(pace_condition(known, pace, generation=current.generation, now=now.wall))
        warning = pace_event(None if before is None else before.reason, pace)
        if warning is not None:
            events.append(warning)
    owned = autoscaler_status(
        applied,
        desired_replicas=decision.desired_replicas,
        mode=decision.mode,
        reason_code=decision.reason_code,
        reason=decision.reason,
        conditions=conditions,
        now=now.wall,
    )
    if workload is not None:
        figures = workload_status(workload, now).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        shown = (applied or {}).get("workload") or {}
        if {**figures, "observedAt": None} == {**shown, "observedAt": None}:
            figures["observedAt"] = shown["observedAt"]  # the same figures: no new write
        owned["workload"] = figures
    elif applied and "workload" in applied:
        # A field left out of an apply is removed: keep the workload applied before.
        owned["workload"] = applied["workload"]
    if costs is not None and (costs.decode is not None or costs.prefill is not None):
        owned["engineCosts"] = costs_status(costs, costs_window_s).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
    return Report(tuple(events), owned)


def costs_status(costs: EngineCosts, window_s: float) -> EngineCostsStatus:
    """status.engineCosts, each factor to two figures (the precision a reading has), so
    steady engines write no status; a term without a finite uncertainty is left out."""

    def term(found: TermEstimate | None) -> TermCost | None:
        # A term no reading bounds yet (too few to bound it: an infinite uncertainty) is not
        # shown; JSON has no infinity, and the API server refuses the whole apply over it.
        if found is None or not math.isfinite(found.uncertainty):
            return None
        return TermCost(
            factor=_digits(found.factor, 2),
            uncertainty=_digits(found.uncertainty, 1),
            readings=int(_digits(found.readings, 1)),
        )

    return EngineCostsStatus(
        window_seconds=_digits(window_s, 2),
        decode_step=term(costs.decode),
        prefill=term(costs.prefill),
    )


def workload_status(workload: LearnedWorkload, now: Now) -> WorkloadStatus:
    """status.workload: the figures to the precision they are known, so a steady workload
    writes no status (means to three figures, counts and rates to two; a P99 is a bucket
    edge)."""

    def tokens(figures: TokenFigures | None) -> TokenFigures | None:
        if figures is None:
            return None
        return TokenFigures(
            mean=_digits(figures.mean, 3),
            p99=figures.p99,
            p99_resolution=_digits(figures.p99_resolution, 2),
        )

    context = workload.mean_context_tokens
    return WorkloadStatus(
        window_seconds=_digits(workload.window_s, 2),
        requests=int(_digits(workload.num_requests, 2)),
        prompt_tokens=tokens(workload.prompt),
        output_tokens=tokens(workload.output),
        mean_context_tokens=None if context is None else _digits(context, 3),
        arrival_rate_per_second=_digits(workload.arrival_rate_per_s, 2),
        prefix_cache_hit_rate=(
            None
            if workload.prefix_cache_hit_rate is None
            else _digits(workload.prefix_cache_hit_rate, 2)
        ),
        observed_at=now.wall,
    )


def _digits(value: float, digits: int) -> float:
    return float(f"{value:.{digits}g}") if math.isfinite(value) else value


def invalid_spec_status(
    applied: Mapping[str, Any] | None, replicas: int, words: str, now: Now
) -> dict[str, Any]:
    """A spec the autoscaler cannot use: the replicas kept, and why, as the status to apply."""
    return autoscaler_status(
        applied,
        desired_replicas=replicas,
        mode=Mode.hold,
        reason_code=Reason.invalid_spec,
        reason=f"autoscaling spec unusable: {words}",
        conditions=(),
        now=now.wall,
    )


def metrics_condition(
    conditions: Sequence[Condition],
    decision: Decision,
    *,
    problems: Sequence[str],
    generation: int,
    now: str,
) -> Condition:
    """The MetricsAvailable condition after one decision (its transition time kept from the one
    in `conditions` unless its status flips).

    The reason is the decision's code when it was blind, so `kubectl describe` shows why the
    replicas are held, and MetricsRead otherwise. The message names the problems the metrics
    source reported but no changing figures, so a steady state writes nothing.
    """
    blindness = BLIND.get(decision.reason_code)
    status, words = (
        (ConditionStatus.true, "metrics read from every ready engine pod")
        if blindness is None
        else (blindness.condition_status, blindness.words)
    )
    reason = "MetricsRead" if status is ConditionStatus.true else decision.reason_code.value
    message = words
    if status is not ConditionStatus.true:
        detail = "; ".join(problems)
        message = (
            f"{words}{': ' + detail if detail else ''}; "
            f"replicas held at {decision.desired_replicas}"
        )
    return cond.condition(
        conditions,
        type_=cond.METRICS_AVAILABLE,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
        now=now,
    )


def pace_condition(
    conditions: Sequence[Condition], pace: EnginePace, *, generation: int, now: str
) -> Condition:
    """The PaceAsProfiled condition for what the engines showed of the step model's price, its
    transition time kept from the one in `conditions` unless its status flips."""
    return cond.condition(
        conditions,
        type_=cond.PACE_AS_PROFILED,
        status=pace.status,
        reason=pace.reason,
        message=pace.message,
        observed_generation=generation,
        now=now,
    )


def autoscaler_status(
    applied: Mapping[str, Any] | None,
    *,
    desired_replicas: int,
    mode: Mode,
    reason_code: Reason,
    reason: str,
    conditions: Sequence[Condition],
    now: str,
) -> dict[str, Any]:
    """Everything the autoscaler owns in status, as the JSON to apply, from what it `applied`
    last. status.autoscaling carries this evaluation's words; `lastDecisionTime` is when the
    outcome (replicas, mode, reason code) last changed. The conditions are the last ones
    applied when none are given. Whether the JSON is applied is `freshness.should_write`'s
    call: at once for a change a reader acts on, the words and figures alone at most every
    `STATUS_REFRESH_S`.
    """
    previous = applied or {}
    before = previous.get("autoscaling") or {}
    outcome = (desired_replicas, mode.value, reason_code.value)
    same = outcome == (before.get("desiredReplicas"), before.get("mode"), before.get("reasonCode"))
    autoscaling = AutoscalingStatus(
        desired_replicas=desired_replicas,
        mode=mode.value,
        reason_code=reason_code.value,
        reason=reason,
        last_decision_time=before["lastDecisionTime"] if same else now,
    )
    owned: dict[str, Any] = {"autoscaling": autoscaling.model_dump(by_alias=True, mode="json")}
    if conditions:
        owned["conditions"] = [
            c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in conditions
        ]
    elif "conditions" in previous:
        # A field left out of an apply is removed: keep the conditions applied before.
        owned["conditions"] = previous["conditions"]
    return owned


def scale_event(
    current_replicas: int, decision: Decision, previous_reason_code: str | None
) -> ServiceEvent | None:
    """The Event for one decision, if it has one: the replicas moved, or the autoscaler went
    blind (in a way the user can fix) for a reason other than the previous decision's."""
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


def _applied_conditions(applied: Mapping[str, Any] | None) -> list[Condition]:
    return [Condition.model_validate(c) for c in (applied or {}).get("conditions", [])]


# The fields of what the autoscaler owns that a disaggregated service keeps per pool.
_PHASE_FIELDS = ("autoscaling", "workload", "engineCosts")


def phase_owned(
    role: str, owned: Mapping[str, Any], split: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What one pool's autoscaler owns in a disaggregated service's status, from what `report`
    gives: its decision, workload and costs under status.phases.<role>, and its conditions
    named for the pool (MetricsAvailable -> PrefillMetricsAvailable), so the two pools' writers
    own disjoint fields. `split` (status.phases' splitPays and verdict) is the decode pool's."""
    pool = {key: owned[key] for key in _PHASE_FIELDS if key in owned}
    out: dict[str, Any] = {"phases": {role: pool, **(split or {})}}
    if "conditions" in owned:
        prefix = role.capitalize()
        out["conditions"] = [{**c, "type": prefix + c["type"]} for c in owned["conditions"]]
    return out


def phase_conditions(role: str, conditions: Sequence[Condition]) -> tuple[Condition, ...]:
    """One pool's conditions among a service's, named as `report` knows them."""
    prefix = role.capitalize()
    return tuple(
        c.model_copy(update={"type": c.type.removeprefix(prefix)})
        for c in conditions
        if c.type.startswith(prefix)
    )
