"""Kubernetes-style conditions: a list keyed by type, one helper to set one.

`set_condition` keeps lastTransitionTime unless the status flips, so a reconcile that learns
nothing new produces an identical list (and therefore no status write). Time comes in as an
RFC 3339 string; nothing here reads the clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenpilot.api.llmservice import Condition, ConditionStatus

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
INFEASIBLE = "Infeasible"
# Set by the reconciler with spec.routing.inferencePool: whether a Gateway accepted the pool.
ROUTED = "Routed"
# Set by the autoscaler: whether its last evaluation could read the service's metrics.
METRICS_AVAILABLE = "MetricsAvailable"
# Set by the autoscaler: whether the engines' steps take what the GPU profile prices them at
# (core.autoscale.correction.engine_pace).
PACE_AS_PROFILED = "PaceAsProfiled"
# The reconciler's; the autoscaler writes MetricsAvailable and PaceAsProfiled. Each writer
# applies only its own types (see adapters/kube/status.py).
RECONCILER_TYPES = (READY, PROGRESSING, DEGRADED, INFEASIBLE, ROUTED)
# Conditions are listed in this order, then any others by type, so output is stable.
ORDER = (
    READY,
    PROGRESSING,
    DEGRADED,
    INFEASIBLE,
    ROUTED,
    METRICS_AVAILABLE,
    PACE_AS_PROFILED,
)


def find(conditions: Sequence[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def _sort_key(condition: Condition) -> tuple[int, str]:
    rank = ORDER.index(condition.type) if condition.type in ORDER else len(ORDER)
    return rank, condition.type


def set_condition(
    conditions: Sequence[Condition],
    *,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    observed_generation: int,
    now: str,
) -> list[Condition]:
    """The list with `type_` set; lastTransitionTime moves only when the status flips."""
    updated = condition(
        conditions,
        type_=type_,
        status=status,
        reason=reason,
        message=message,
        observed_generation=observed_generation,
        now=now,
    )
    rest = [c for c in conditions if c.type != type_]
    return sorted([*rest, updated], key=_sort_key)


def condition(
    conditions: Sequence[Condition],
    *,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    observed_generation: int,
    now: str,
) -> Condition:
    """`type_` as it is now, its lastTransitionTime kept from the one in `conditions` unless
    the status flips."""
    previous = find(conditions, type_)
    since = previous.last_transition_time if previous and previous.status == status else now
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=observed_generation,
    )
