"""When the autoscaler writes its status: when a reader would notice, not at every evaluation.

A reader of `kubectl get` or of status acts on the outcome (desired replicas, mode, reason
code) and on the conditions (status, reason, message, observed generation: a condition's
message names what is wrong and the fix, and carries no figure that moves every evaluation);
an evaluation that changes any of them writes status at once. The decision's words
(`status.autoscaling.reason`) and the learned figures (`status.workload`,
`status.engineCosts`) go with that write; on their own they are written when a learned figure
moves by more than `FIGURE_BAND` of what status shows, when one appears or goes, when the
re-tune would make something else of them (a workload it now trusts, a cost term it now
prices), and otherwise at least every `STATUS_REFRESH_S`. A learned figure is an estimate
from a window of requests whose own noise is a few percent; writing every wobble would cost
the API server an apply per service per evaluation and tell a reader nothing.

Every evaluation's figures go to the operator's metrics, where dashboards read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenpilot.core.autoscale.costs import TermEstimate
from tokenpilot.core.autoscale.workload import MIN_REQUESTS

# How far a learned figure may move from what status shows before status is rewritten for it.
FIGURE_BAND = 0.05
# The longest status goes unwritten while an evaluation keeps finding something new to say.
STATUS_REFRESH_S = 300.0

# status.autoscaling's fields that change only with the outcome or are its words.
_WORDS = frozenset({"reason", "lastDecisionTime"})
# Learned sections, compared figure by figure within the band.
_LEARNED = ("workload", "engineCosts")
# When a learned section was read, over how long and how many things: the basis of its
# figures, which grows with every evaluation and says nothing alone. What a reader does with
# the counts (the re-tune trusts a workload of MIN_REQUESTS, a cost term once certain) is
# compared in `_verdicts`.
_BASIS = frozenset({"observedAt", "windowSeconds", "requests", "readings"})


def should_write(
    applied: Mapping[str, Any] | None,
    owned: Mapping[str, Any],
    *,
    since_applied_s: float | None,
) -> bool:
    """Whether to apply `owned` over what was `applied` `since_applied_s` seconds ago."""
    if applied is None or since_applied_s is None:
        return True
    if owned == applied:
        return False
    return reader_would_notice(applied, owned) or since_applied_s >= STATUS_REFRESH_S


def reader_would_notice(applied: Mapping[str, Any], owned: Mapping[str, Any]) -> bool:
    """Whether `owned` differs from `applied` in what a reader acts on: the outcome, a
    condition's state, a status section appearing or going, or a learned figure past the band."""
    if set(owned) != set(applied):
        return True
    before, after = applied.get("autoscaling") or {}, owned.get("autoscaling") or {}
    if _without(before, _WORDS) != _without(after, _WORDS):
        return True
    if _states(owned.get("conditions")) != _states(applied.get("conditions")):
        return True
    if any(_moved(a, b) for a, b in zip(_verdicts(applied), _verdicts(owned), strict=True)):
        return True
    return any(_moved(applied.get(key), owned.get(key)) for key in _LEARNED)


def _verdicts(status: Mapping[str, Any]) -> tuple[bool | float, ...]:
    """What the re-tune makes of the learned sections: whether the workload rests on enough
    requests, and the factor it prices each engine cost term at (1 until the term is certain
    and slower than the profile)."""
    workload = status.get("workload") or {}
    costs = status.get("engineCosts") or {}
    terms = [costs.get(key) for key in ("decodeStep", "prefill")]
    return (
        workload.get("requests", 0) >= MIN_REQUESTS,
        *(
            1.0
            if term is None
            else TermEstimate(term["factor"], term["uncertainty"], term["readings"]).slowdown
            for term in terms
        ),
    )


def _states(conditions: Any) -> list[tuple[Any, ...]]:
    """What a reader acts on in each condition: all of it but when it last flipped."""
    return [
        (
            c.get("type"),
            c.get("status"),
            c.get("reason"),
            c.get("message"),
            c.get("observedGeneration"),
        )
        for c in conditions or ()
    ]


def _without(fields: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in keys}


def _moved(before: Any, after: Any) -> bool:
    """A learned value moved: a figure past the band, anything else changed."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        if set(before) - _BASIS != set(after) - _BASIS:
            return True
        return any(_moved(before[k], after[k]) for k in before if k not in _BASIS)
    numbers = (int, float)
    if (
        isinstance(before, numbers)
        and isinstance(after, numbers)
        and not isinstance(before, bool)
        and not isinstance(after, bool)
    ):
        return abs(after - before) > FIGURE_BAND * abs(before)
    return bool(before != after)
