"""decide(): the replicas for one service from its SLO signals, as a pure function.

An ordered chain; the first check that speaks decides:

1. **Bounds.** A fleet below min_replicas or above max_replicas is brought within them,
   whatever the metrics say.
2. **Blindness holds.** An observation older than max_observation_age_s, a fleet with no ready
   pod yet, a P99 that waits for its second scrape, or a signal that is missing or NaN keeps
   the replicas and says why (decision.BLIND). It restarts both windows and forgets the last
   queue reading, so nothing seen before the gap counts towards a later move.
3. **Breach** (core.autoscale.signals: pressure above 1). Scale up proportionally:
   ceil(ready x pressure) replicas, at least the plan's need where a capacity model sizes the
   fleet. Replicas that are starting count as coming capacity, so if spec.replicas already
   covers the need the autoscaler waits for them. Outside panic the breach must have lasted
   scale_up_stabilization_s; at pressure >= panic_ratio the window is skipped. A TTFT over its
   SLO with the ITL within its SLO and no more requests in flight than engines is the prompts'
   own prefill (`PrefillBound`): every request has an engine to itself (the balancer sends an
   arrival to an idle engine first), no fleet size shortens one prefill, so the autoscaler holds
   instead, and may still step down as in 5.
4. **Queue spike.** A queue over target in this reading only is held until the next evaluation
   confirms it, unless the plan's forecast already asks for more replicas: then it scales up
   as in 5, as it would have with no queue at all.
5. **No breach.** Where a capacity model sizes the fleet (core.autoscale.plan), to its need: up
   at once, down with every pod visible, the queue spread over the smaller fleet under
   scale_down_ratio of its target, and a forecast that has seen a whole scale-down window.
   Without a model, one step down once the fleet one step smaller would still have been within
   targets (latencies provably under their SLO by their bucket edge, the queue under
   scale_down_ratio of its target, P99s scaled by the per-replica load after the step at most
   scale_down_latency_ratio of their SLO) for scale_down_stabilization_s with every pod
   visible, and no lower than the largest of the fleets each evaluation of the window found
   would stay within targets. A step down that leaves every request its own engine skips the
   latency tests: neither P99 depends on the fleet size there. A partial scrape never scales
   down, but a breach seen on the visible pods may still scale up.

Every move passes one bounding function (`bounded`): at most a step from the current fleet
(max_scale_up_step up, `max(max_scale_up_step, current)` in panic and for the plan's need;
max_scale_down_step down, or the whole way to the plan's need), within the bounds, and no step
down sooner than scale_down_step_interval_s after the last one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tokenpilot.core.autoscale.case import Case, bounded
from tokenpilot.core.autoscale.decision import BLIND, Decision, Mode, PrefillBound, Reason
from tokenpilot.core.autoscale.headroom import prefill_bound, without_breach
from tokenpilot.core.autoscale.observation import History, Observation
from tokenpilot.core.autoscale.plan import ModelNeed
from tokenpilot.core.autoscale.policy import AutoscalePolicy
from tokenpilot.core.autoscale.signals import describe, dominant, missing, read_signals

# Guards ceil() against 3 * (4/3) = 4.0000000001 asking for a fifth replica.
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Evidence:
    """What one evaluation decides on: what the metrics showed, and the fleet the plan's step
    model sizes for the forecast (None where no model sizes it)."""

    observation: Observation
    need: ModelNeed | None = None


def decide(policy: AutoscalePolicy, history: History, evidence: Evidence, now_s: float) -> Decision:
    """The replicas the observed service should have at `now_s`, with mode and reason.

    Pure: the same arguments always give the same Decision. Pass `decision.history` back in on
    the next call (start from `History()`); `now_s` and the observation's `observed_at_s` must
    come from the same clock (monotonic seconds in the operator, virtual seconds in a
    simulation).
    """
    seen = evidence.observation
    signals = read_signals(
        policy, seen, history.last_queue_per_replica, proven_only=evidence.need is not None
    )
    case = Case(policy, history, seen, signals, now_s, evidence.need)
    decision = _decide(case)
    if decision.mode is Mode.hold and decision.reason_code in BLIND:
        return decision
    # The reading this evaluation saw is the "previous" one for the next.
    remembered = replace(
        decision.history, last_queue_per_replica=decision.signals.queue_per_replica
    )
    return replace(decision, history=remembered)


def _decide(case: Case) -> Decision:
    for check in (_out_of_bounds, _stale, _no_ready_pods, _awaiting_second_scrape, _missing):
        if (decision := check(case)) is not None:
            return decision
    if case.signals.pressure > 1.0:
        bound = prefill_bound(case.policy, case.seen, case.signals)
        if bound is None:
            return _scale_up(case)
        return _prefill_hold(without_breach(case, bound), bound)
    if (case.signals.queue_spike_ratio or 0.0) > 1.0:
        sized = without_breach(case, None)
        if sized.mode is Mode.scale_up:
            # The forecast asks for more on its own evidence; a second queue reading would only
            # delay what a burst without a queue would already have had.
            return sized
        return case.decision(
            case.current,
            Mode.hold,
            Reason.queue_spike,
            f"{describe(case.policy, case.signals)}: the queue is over target in this reading "
            "only; scaling up if the next evaluation still sees it",
            replace(case.history, calm_since_s=None),
        )
    return without_breach(case, None)


def _out_of_bounds(case: Case) -> Decision | None:
    policy, current = case.policy, case.current
    if policy.min_replicas <= current <= policy.max_replicas:
        return None
    desired = policy.clamp(current)
    if desired > current:
        return case.decision(
            desired,
            Mode.scale_up,
            Reason.below_min,
            f"{current} replicas is below minReplicas {policy.min_replicas}",
            replace(case.history, calm_since_s=None, last_short_s=case.now_s),
        )
    return case.decision(
        desired,
        Mode.scale_down,
        Reason.above_max,
        f"{current} replicas is above maxReplicas {policy.max_replicas}",
        replace(case.history, breach_since_s=None, calm_since_s=None, last_scale_down_s=case.now_s),
    )


def _stale(case: Case) -> Decision | None:
    age_s = case.now_s - case.seen.observed_at_s
    limit_s = case.policy.max_observation_age_s
    if age_s <= limit_s:
        return None
    return case.hold(
        Reason.stale_metrics,
        f"metrics are {age_s:.1f} s old (limit {limit_s:g} s); "
        f"keeping {case.current} replicas until fresh ones arrive",
    )


def _no_ready_pods(case: Case) -> Decision | None:
    if case.seen.num_pods_expected != 0:
        return None
    return case.hold(
        Reason.no_ready_pods,
        f"no engine pod is ready yet ({case.signals.starting_replicas} starting); "
        f"nothing to measure, keeping {case.current} replicas",
    )


def _awaiting_second_scrape(case: Case) -> Decision | None:
    if not (case.seen.awaiting_second_scrape and missing(case.policy, case.seen)):
        return None
    return case.hold(
        Reason.awaiting_second_scrape,
        f"the ready pods were read once so far; a P99 needs a second reading; keeping "
        f"{case.current} replicas",
    )


def _missing(case: Case) -> Decision | None:
    lacking = missing(case.policy, case.seen)
    if not lacking:
        return None
    why = "; ".join(case.seen.problems) or "no value"
    return case.hold(
        Reason.missing_metrics,
        f"cannot read {', '.join(lacking)} ({why}); keeping {case.current} replicas",
    )


def _scale_up(case: Case) -> Decision:
    policy, history, seen, signals = case.policy, case.history, case.seen, case.signals
    current, now_s = case.current, case.now_s
    pressure = signals.pressure
    breach_since_s = now_s if history.breach_since_s is None else history.breach_since_s
    serving = max(seen.ready_replicas, seen.num_pods_expected)
    needed = math.ceil(serving * pressure - _EPSILON)
    if case.need is not None and case.need.can_grow and case.need.replicas > needed:
        # The breach is the feedback; the model's forecast may already ask for more.
        needed = case.need.replicas
    panic = pressure >= policy.panic_ratio
    figures = describe(policy, signals)
    # Every outcome of a breach finds the fleet short, whether it moves now or waits.
    waiting = replace(history, breach_since_s=breach_since_s, calm_since_s=None, last_short_s=now_s)
    if needed <= current:
        return case.decision(
            current,
            Mode.hold,
            Reason.capacity_starting,
            f"{figures}: {serving} ready replicas need {needed}, and the "
            f"{signals.starting_replicas} starting ones already make {current}; "
            "waiting for them to become ready",
            waiting,
        )
    step = max(policy.max_scale_up_step, current) if panic else policy.max_scale_up_step
    desired = bounded(case, needed, step).replicas
    if desired <= current:
        return case.decision(
            current,
            Mode.hold,
            Reason.at_max,
            f"{figures}: {needed} replicas needed but maxReplicas is {policy.max_replicas}",
            waiting,
        )
    breach_s = now_s - breach_since_s
    if not panic and breach_s < policy.scale_up_stabilization_s:
        return case.decision(
            current,
            Mode.hold,
            Reason.confirming,
            f"{figures}: over target for {breach_s:.1f} s of the "
            f"{policy.scale_up_stabilization_s:g} s scale-up window",
            waiting,
        )
    limits = []
    if desired < needed:
        limits.append(
            f"capped at {desired} by "
            + ("maxReplicas" if desired == policy.max_replicas else f"a step of {step}")
        )
    if seen.num_pods_scraped < seen.num_pods_expected:
        limits.append(f"seen on {seen.num_pods_scraped} of {serving} pods")
    tail = f" ({'; '.join(limits)})" if limits else ""
    return case.decision(
        desired,
        Mode.panic if panic else Mode.scale_up,
        dominant(signals),
        f"{figures}: {pressure:.2f}x target, {serving} ready replicas need {needed}; "
        f"scaling {current} -> {desired}{tail}",
        waiting,
    )


def _prefill_hold(decision: Decision, bound: PrefillBound) -> Decision:
    """A TTFT breach replicas cannot fix: keep a step up, a step down or a partial-view hold
    as decided; turn every other outcome into a `PrefillBound` hold (the calm window keeps
    running). A step down stays one: the breach is each prompt's own prefill on an engine of
    its own, which no fleet size changes, and the step down names it."""
    named = replace(decision, prefill_bound=bound)
    if decision.mode in (Mode.scale_up, Mode.scale_down) or (
        decision.reason_code is Reason.partial_scrape
    ):
        return named
    return replace(named, mode=Mode.hold, reason_code=Reason.prefill_bound)
