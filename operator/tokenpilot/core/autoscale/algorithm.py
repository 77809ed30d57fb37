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
   confirms it.
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

from tokenpilot.core.autoscale.decision import (
    BLIND,
    Decision,
    Mode,
    PrefillBound,
    Reason,
    Signals,
)
from tokenpilot.core.autoscale.figures import approx
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
    case = _Case(policy, history, seen, signals, now_s, evidence.need)
    decision = _decide(case)
    if decision.mode is Mode.hold and decision.reason_code in BLIND:
        return decision
    # The reading this evaluation saw is the "previous" one for the next.
    remembered = replace(
        decision.history, last_queue_per_replica=decision.signals.queue_per_replica
    )
    return replace(decision, history=remembered)


@dataclass(frozen=True, slots=True)
class _Case:
    """One evaluation as every check of the chain sees it."""

    policy: AutoscalePolicy
    history: History
    seen: Observation
    signals: Signals
    now_s: float
    need: ModelNeed | None

    @property
    def current(self) -> int:
        return self.seen.spec_replicas

    def decision(
        self, replicas: int, mode: Mode, code: Reason, words: str, history: History
    ) -> Decision:
        return Decision(replicas, mode, code, words, self.signals, history)

    def hold(self, code: Reason, words: str) -> Decision:
        # Blind evaluations break both runs and the queue's pair of readings: a window must be
        # observed end to end to count.
        cleared = replace(
            self.history, breach_since_s=None, calm_since_s=None, last_queue_per_replica=None
        )
        return self.decision(self.current, Mode.hold, code, words, cleared)


def _decide(case: _Case) -> Decision:
    for check in (_out_of_bounds, _stale, _no_ready_pods, _awaiting_second_scrape, _missing):
        if (decision := check(case)) is not None:
            return decision
    if case.signals.pressure > 1.0:
        bound = prefill_bound(case.policy, case.seen, case.signals)
        if bound is None:
            return _scale_up(case)
        return _prefill_hold(_without_breach(case, bound), bound)
    if (case.signals.queue_spike_ratio or 0.0) > 1.0:
        return case.decision(
            case.current,
            Mode.hold,
            Reason.queue_spike,
            f"{describe(case.policy, case.signals)}: the queue is over target in this reading "
            "only; scaling up if the next evaluation still sees it",
            replace(case.history, calm_since_s=None),
        )
    return _without_breach(case, None)


def _out_of_bounds(case: _Case) -> Decision | None:
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
            replace(case.history, calm_since_s=None, last_scale_up_s=case.now_s),
        )
    return case.decision(
        desired,
        Mode.scale_down,
        Reason.above_max,
        f"{current} replicas is above maxReplicas {policy.max_replicas}",
        replace(case.history, breach_since_s=None, calm_since_s=None, last_scale_down_s=case.now_s),
    )


def _stale(case: _Case) -> Decision | None:
    age_s = case.now_s - case.seen.observed_at_s
    limit_s = case.policy.max_observation_age_s
    if age_s <= limit_s:
        return None
    return case.hold(
        Reason.stale_metrics,
        f"metrics are {age_s:.1f} s old (limit {limit_s:g} s); "
        f"keeping {case.current} replicas until fresh ones arrive",
    )


def _no_ready_pods(case: _Case) -> Decision | None:
    if case.seen.num_pods_expected != 0:
        return None
    return case.hold(
        Reason.no_ready_pods,
        f"no engine pod is ready yet ({case.signals.starting_replicas} starting); "
        f"nothing to measure, keeping {case.current} replicas",
    )


def _awaiting_second_scrape(case: _Case) -> Decision | None:
    if not (case.seen.awaiting_second_scrape and missing(case.policy, case.seen)):
        return None
    return case.hold(
        Reason.awaiting_second_scrape,
        f"the ready pods were read once so far; a P99 needs a second reading; keeping "
        f"{case.current} replicas",
    )


def _missing(case: _Case) -> Decision | None:
    lacking = missing(case.policy, case.seen)
    if not lacking:
        return None
    why = "; ".join(case.seen.problems) or "no value"
    return case.hold(
        Reason.missing_metrics,
        f"cannot read {', '.join(lacking)} ({why}); keeping {case.current} replicas",
    )


@dataclass(frozen=True, slots=True)
class Bounded:
    """A move as one decision may make it; `too_soon_s` is set when it is a step down held by
    the step-down interval: the seconds since the last step down."""

    replicas: int
    too_soon_s: float | None = None


def bounded(case: _Case, wanted: int, step: int) -> Bounded:
    """`wanted` replicas as far as one decision may go towards them: at most `step` from the
    current fleet, within [minReplicas, maxReplicas], and no step down sooner than
    scale_down_step_interval_s after the last one."""
    policy, current = case.policy, case.current
    replicas = policy.clamp(min(current + step, max(current - step, wanted)))
    last_s = case.history.last_scale_down_s
    since_s = math.inf if last_s is None else case.now_s - last_s
    if replicas < current and since_s < policy.scale_down_step_interval_s:
        return Bounded(replicas, since_s)
    return Bounded(replicas)


def _too_soon(case: _Case, since_s: float, lead: str, history: History) -> Decision:
    return case.decision(
        case.current,
        Mode.steady,
        Reason.stabilizing,
        f"{lead} last step down {since_s:.0f} s ago, next after "
        f"{case.policy.scale_down_step_interval_s:g} s",
        history,
    )


def _blind_to_a_step_down(case: _Case, figures: str) -> Decision | None:
    """A hold while some pods could not be read: what they carry is unknown, so no step down."""
    seen = case.seen
    unseen = seen.num_pods_expected - seen.num_pods_scraped
    if unseen <= 0:
        return None
    why = "; ".join(seen.problems) or "no answer"
    return case.hold(
        Reason.partial_scrape,
        f"{figures} on {seen.num_pods_scraped} of {seen.num_pods_expected} pods; {unseen} "
        f"could not be read ({why}); not scaling down while blind",
    )


def _scale_up(case: _Case) -> Decision:
    policy, history, seen, signals = case.policy, case.history, case.seen, case.signals
    current, now_s = case.current, case.now_s
    pressure = signals.pressure
    breach_since_s = now_s if history.breach_since_s is None else history.breach_since_s
    serving = max(seen.ready_replicas, seen.num_pods_expected)
    needed = math.ceil(serving * pressure - _EPSILON)
    if case.need is not None and case.need.replicas > needed:
        # The breach is the feedback; the model's forecast may already ask for more.
        needed = case.need.replicas
    panic = pressure >= policy.panic_ratio
    figures = describe(policy, signals)
    waiting = replace(history, breach_since_s=breach_since_s, calm_since_s=None)
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
        replace(waiting, last_scale_up_s=now_s),
    )


def _without_breach(case: _Case, bound: PrefillBound | None) -> Decision:
    """No signal over target (or only a TTFT no fleet size shortens, `bound`): size to the
    plan's need where a model sizes the fleet, else step down on sustained headroom."""
    figures = describe(case.policy, case.signals)
    if case.need is not None:
        return _size_to_need(case, case.need, figures if bound is None else f"{figures}: {bound}")
    return _step_down(case, figures, bound)


def _size_to_need(case: _Case, need: ModelNeed, figures: str) -> Decision:
    """Up at once (capacity takes a whole startup to arrive); down only with every pod
    visible, the queue spread over the smaller fleet under the scale-down ratio, and a forecast
    that has seen a whole scale-down window."""
    policy, current = case.policy, case.current
    quiet = replace(case.history, breach_since_s=None, calm_since_s=None)
    lead = f"{figures}; {need.words}"
    if need.replicas > current:
        desired = bounded(case, need.replicas, max(policy.max_scale_up_step, current)).replicas
        if desired <= current:
            return case.decision(current, Mode.hold, Reason.at_max, lead, quiet)
        return case.decision(
            desired,
            Mode.scale_up,
            Reason.predicted_demand,
            f"{lead}; scaling {current} -> {desired}",
            replace(quiet, last_scale_up_s=case.now_s),
        )
    if need.replicas == current:
        return case.decision(current, Mode.steady, Reason.within_targets, lead, quiet)
    if not need.can_shrink:
        return case.decision(
            current,
            Mode.steady,
            Reason.stabilizing,
            f"{lead}, but the forecast has seen {need.seen_s:.0f} s of the "
            f"{policy.scale_down_stabilization_s:g} s scale-down window: keeping {current}",
            quiet,
        )
    if blind := _blind_to_a_step_down(case, figures):
        return blind
    if crowded := _queue_after(policy, case.seen, need.replicas):
        return case.decision(
            current, Mode.steady, Reason.within_targets, f"{lead}, but {crowded}", quiet
        )
    move = bounded(case, need.replicas, current)
    if move.too_soon_s is not None:
        return _too_soon(case, move.too_soon_s, f"{lead};", quiet)
    return case.decision(
        move.replicas,
        Mode.scale_down,
        Reason.model_headroom,
        f"{lead}; scaling {current} -> {move.replicas}",
        replace(quiet, last_scale_down_s=case.now_s),
    )


def _step_down(case: _Case, figures: str, bound: PrefillBound | None) -> Decision:
    """One step down once the smaller fleet has stayed within targets for the window."""
    policy, history, now_s, current = case.policy, case.history, case.now_s, case.current
    # A prompt-bound TTFT is over its SLO: say so instead of "within targets".
    state = "within targets" if bound is None else "keeping the replicas"
    if bound is not None:
        figures = f"{figures}: {bound}"
    if blind := _blind_to_a_step_down(case, figures):
        return blind
    within = replace(history, breach_since_s=None, calm_since_s=None)
    target = bounded(case, current - policy.max_scale_down_step, policy.max_scale_down_step)
    if target.replicas >= current:
        return case.decision(
            current,
            Mode.steady,
            Reason.within_targets,
            f"{figures}: {state} at minReplicas {policy.min_replicas}",
            within,
        )
    short = _short_after_step(policy, case.seen, target.replicas)
    if short:
        return case.decision(
            current,
            Mode.steady,
            Reason.within_targets,
            f"{figures}: {state}, but on {target.replicas} replicas {short}",
            within,
        )
    calm_since_s = now_s if history.calm_since_s is None else history.calm_since_s
    window_start_s = max(calm_since_s, now_s - policy.scale_down_stabilization_s)
    floors = (
        *((at_s, n) for at_s, n in history.calm_floors if at_s >= window_start_s),
        (now_s, _fewest_within_targets(policy, case.seen, target.replicas)),
    )
    calm = replace(history, breach_since_s=None, calm_since_s=calm_since_s, calm_floors=floors)
    calm_s = now_s - calm_since_s
    if calm_s < policy.scale_down_stabilization_s:
        return case.decision(
            current,
            Mode.steady,
            Reason.stabilizing,
            f"{figures}: headroom for {calm_s:.0f} s of the "
            f"{policy.scale_down_stabilization_s:g} s scale-down window",
            calm,
        )
    if target.too_soon_s is not None:
        return _too_soon(case, target.too_soon_s, f"{figures}:", calm)
    floor = max(n for _, n in floors)
    desired = max(floor, target.replicas)
    if desired >= current:
        return case.decision(
            current,
            Mode.steady,
            Reason.stabilizing,
            f"{figures}: {state}, but the busiest reading of the last "
            f"{policy.scale_down_stabilization_s:g} s needs {floor} replicas",
            calm,
        )
    return case.decision(
        desired,
        Mode.scale_down,
        Reason.sustained_headroom,
        f"{figures}: {desired} replicas would "
        + ("stay within targets" if bound is None else "still give every request its own engine")
        + f" at every reading of the last {calm_s:.0f} s; scaling {current} -> {desired}",
        replace(calm, last_scale_down_s=now_s),
    )


def _fewest_within_targets(policy: AutoscalePolicy, observation: Observation, passing: int) -> int:
    """The fewest replicas, down from `passing` (which `_short_after_step` accepts), that this
    observation shows would stay within targets, each step smaller tested as in 5."""
    fewest = passing
    while (
        fewest > policy.min_replicas and _short_after_step(policy, observation, fewest - 1) is None
    ):
        fewest -= 1
    return fewest


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


def _solo(observation: Observation, num_engines: int) -> bool:
    """Whether `num_engines` engines give every request in flight one of its own (a request
    waiting then has just arrived at an idle engine)."""
    waiting = observation.num_requests_waiting or 0.0
    running = observation.num_requests_running or 0.0
    return running + waiting <= num_engines


def prefill_bound(
    policy: AutoscalePolicy, observation: Observation, signals: Signals
) -> PrefillBound | None:
    """The TTFT breach set by prompt length, or None if more replicas may help: only the TTFT
    is over its SLO and every request in flight has an engine to itself. A TTFT from load shows
    as engines shared (prefills splitting one token budget, requests queued behind others)."""
    if signals.ttft_ratio is None or signals.ttft_ratio <= 1.0 or signals.ttft_p99_s is None:
        return None
    if (signals.itl_ratio or 0.0) > 1.0 or policy.ttft_p99_slo_s is None:
        return None
    if observation.num_pods_scraped == 0 or not _solo(observation, observation.num_pods_scraped):
        return None
    in_flight = (observation.num_requests_running or 0.0) + (
        observation.num_requests_waiting or 0.0
    )
    return PrefillBound(
        signals.ttft_p99_s, policy.ttft_p99_slo_s, in_flight / observation.num_pods_scraped
    )


def _queue_after(policy: AutoscalePolicy, observation: Observation, replicas: int) -> str | None:
    """Why the queue would be too long on `replicas` replicas, or None."""
    queue = (observation.num_requests_waiting or 0.0) / max(1, replicas)
    if queue <= policy.scale_down_ratio * policy.target_queue_per_replica:
        return None
    return f"the queue would be {queue:.1f}/replica, over {policy.scale_down_ratio:g}x its target"


def _short_after_step(
    policy: AutoscalePolicy, observation: Observation, replicas_after: int
) -> str | None:
    """Why the fleet on `replicas_after` replicas could break a target, or None if it would not.

    Called only with every pod visible and no signal missing.
    """
    if crowded := _queue_after(policy, observation, replicas_after):
        return crowded
    if _solo(observation, replicas_after):
        # Every request would still have an engine of its own: no step gets a larger batch,
        # so neither P99 depends on the step (a TTFT over its SLO here is prompt length).
        return None
    # The balancer spreads running + waiting over the replicas left: each carries this much
    # more than today, and a step's time grows at most in proportion to its batch.
    load_factor = max(1.0, observation.num_pods_scraped / max(1, replicas_after))
    for name, quantile, slo_s in (
        ("ITL", observation.itl, policy.itl_p99_slo_s),
        ("TTFT", observation.ttft, policy.ttft_p99_slo_s),
    ):
        if slo_s is None or quantile is None or quantile.idle:
            continue
        if quantile.bound_s > slo_s:
            return (
                f"P99 {name} is not provably under its SLO now (its bucket reaches "
                f"{quantile.bound_s:.3f} s)"
            )
        projected_s = quantile.p99_s * load_factor
        if projected_s > policy.scale_down_latency_ratio * slo_s:
            return (
                f"P99 {name} would be about {approx(projected_s)} s, over "
                f"{policy.scale_down_latency_ratio * slo_s:g} s"
            )
    return None
