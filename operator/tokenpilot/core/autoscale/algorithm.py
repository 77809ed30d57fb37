"""decide(): replicas for one service from one observation, as a pure function.

The algorithm, in the order it is applied:

1. Bounds first: a scale below min_replicas or above max_replicas is corrected whatever the
   metrics say.
2. Blindness holds: an observation older than max_observation_age_s, a fleet with no ready pod
   yet, or a signal that is missing or NaN keeps the replicas as they are and says why. It also
   restarts both windows and forgets the last queue reading, so nothing seen before the gap
   counts towards a later move.
3. Signals: ITL and TTFT = P99 / SLO (0.0 when the window had no traffic). The queue (waiting
   requests per scraped pod / target) counts as the smaller of this reading and the previous
   evaluation's, so a burst one engine clears between two scrapes moves nothing, and a backlog
   acts within two intervals of appearing. Pressure is the largest counted ratio. Where a
   capacity model sizes the fleet, a P99 read over its SLO only by interpolation inside the
   bucket that holds the SLO counts at the SLO: the bucket's edges cannot tell which side the
   exact P99 is on, and acting on the guess scaled up and back down every few minutes on
   smooth load. Without a model the interpolated P99 is the only scale-up signal and counts.
4. Pressure above 1 scales up, proportionally: ceil(ready * pressure) replicas are needed.
   Replicas that are starting count as coming capacity, so if spec.replicas already covers the
   need the autoscaler waits for them instead of asking again. Outside panic the breach must
   have lasted scale_up_stabilization_s and the step is at most max_scale_up_step; at
   pressure >= panic_ratio the window is skipped and the fleet may double. A queue over target
   in this reading only is held as a spike until the next evaluation confirms it.
5. Otherwise scale down only if the fleet one step smaller would still be within targets
   (latencies provably under their SLO by their bucket edge, the queue spread over fewer
   replicas under scale_down_ratio of its target, P99s scaled by the per-replica load after the
   step at most scale_down_latency_ratio of their SLO) for scale_down_stabilization_s with every
   pod visible, and scale_down_step_interval_s has passed since the last step down; then
   remove up to max_scale_down_step replicas, but go no lower than the largest of the fleets
   each evaluation of the window found would stay within targets (its busiest reading, not
   only the latest, must fit the smaller fleet).
   A partial scrape never scales down, but a breach seen on the visible pods may still scale up.
6. One regime is exempt from load arithmetic: no more requests in flight (running + waiting)
   than engines. The least-outstanding balancer then gives every request an engine of its own
   (a request seen waiting there has just arrived), so a step carries one sequence whatever the
   fleet size, and a TTFT is that request's own prefill. A TTFT over its SLO in that state,
   with the ITL within its SLO, is set by prompt length: more replicas cannot shorten one
   prefill, so decide() holds (`PrefillBound`) instead of scaling up, and may still step down as
   in 5. A step down that leaves every request its own engine skips the latency tests of 5:
   neither P99 depends on the fleet size there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tokenpilot.core.autoscale.decision import BLIND, Decision, Mode, Reason, Signals
from tokenpilot.core.autoscale.demand import MAX_MEMORY_S, Forecast
from tokenpilot.core.autoscale.figures import approx
from tokenpilot.core.autoscale.observation import History, LatencyQuantile, Observation
from tokenpilot.core.autoscale.policy import AutoscalePolicy

# Guards ceil() against 3 * (4/3) = 4.0000000001 asking for a fifth replica.
_EPSILON = 1e-9


def decide(
    policy: AutoscalePolicy,
    history: History,
    observation: Observation,
    now_s: float,
    outlook: Forecast | None = None,
    watched_s: float | None = None,
    slowness: float = 1.0,
) -> Decision:
    """The replicas `observation`'s service should have at `now_s`, with mode and reason.

    `watched_s`: how long this process has watched the service where its forecast holds
    load from before (a memory restored after a restart); a step down waits until it has
    watched a whole scale-down window itself, as a fresh start does. `slowness`: how much
    slower than the step model prices them the engines were measured to run
    (core.autoscale.correction.engine_slowness); the model prices every step that much longer.

    Pure: the same arguments always give the same Decision. Pass `decision.history` back in on
    the next call (start from `History()`); `now_s` and `observation.observed_at_s` must come
    from the same clock (monotonic seconds in the operator, virtual seconds in a simulation).
    """
    model = _model_need(policy, outlook, watched_s, slowness)
    decision = _decide(policy, history, observation, now_s, model)
    if decision.mode is Mode.hold and decision.reason_code in BLIND:
        return decision
    # The reading this evaluation saw is the "previous" one for the next.
    remembered = replace(
        decision.history, last_queue_per_replica=decision.signals.queue_per_replica
    )
    return replace(decision, history=remembered)


def _decide(
    policy: AutoscalePolicy,
    history: History,
    observation: Observation,
    now_s: float,
    model: ModelNeed | None,
) -> Decision:
    current = observation.desired_replicas
    signals = _signals(
        policy, observation, history.last_queue_per_replica, proven_only=model is not None
    )

    if current < policy.min_replicas or current > policy.max_replicas:
        return _to_bounds(policy, history, signals, current, now_s)

    age_s = now_s - observation.observed_at_s
    if not age_s <= policy.max_observation_age_s:
        return _hold(
            Reason.stale_metrics,
            f"metrics are {age_s:.1f} s old (limit {policy.max_observation_age_s:g} s); "
            f"keeping {current} replicas until fresh ones arrive",
            current,
            signals,
            history,
        )
    if observation.num_pods_expected == 0:
        return _hold(
            Reason.no_ready_pods,
            f"no engine pod is ready yet ({signals.starting_replicas} starting); "
            f"nothing to measure, keeping {current} replicas",
            current,
            signals,
            history,
        )
    missing = _missing(policy, observation)
    if missing and observation.awaiting_second_scrape:
        return _hold(
            Reason.awaiting_second_scrape,
            f"the ready pods were read once so far; a P99 needs a second reading; keeping "
            f"{current} replicas",
            current,
            signals,
            history,
        )
    if missing:
        why = "; ".join(observation.problems) or "no value"
        return _hold(
            Reason.missing_metrics,
            f"cannot read {', '.join(missing)} ({why}); keeping {current} replicas",
            current,
            signals,
            history,
        )

    if signals.pressure > 1.0:
        bound = _prefill_bound(policy, observation, signals)
        if bound is None:
            return _scale_up(policy, history, observation, signals, now_s, model)
        return _prefill_hold(
            _scale_down(policy, history, observation, signals, now_s, bound, model)
        )
    if (signals.queue_spike_ratio or 0.0) > 1.0:
        return Decision(
            current,
            Mode.hold,
            Reason.queue_spike,
            f"{_describe(policy, signals)}: the queue is over target in this reading only; "
            "scaling up if the next evaluation still sees it",
            signals,
            replace(history, calm_since_s=None),
        )
    return _scale_down(policy, history, observation, signals, now_s, None, model)


def _signals(
    policy: AutoscalePolicy,
    observation: Observation,
    last_queue_per_replica: float | None,
    *,
    proven_only: bool = False,
) -> Signals:
    """The signals of `observation`. With `proven_only` (a capacity model sizes the fleet) a
    P99 over its SLO counts as a breach only where its bucket's edges prove it: a reading
    interpolated inside a bucket that holds the SLO is counted at the SLO (see the module
    docstring, 3)."""
    scraped = observation.num_pods_scraped
    waiting = observation.num_requests_waiting
    queue_per_replica = None
    if waiting is not None and math.isfinite(waiting) and scraped > 0:
        queue_per_replica = waiting / scraped
    target = policy.target_queue_per_replica
    spike_ratio = None if queue_per_replica is None else queue_per_replica / target
    queue_ratio = spike_ratio
    if spike_ratio is not None:
        # Only a queue that outlasts one evaluation interval counts (see the module docstring).
        queue_ratio = min(spike_ratio, (last_queue_per_replica or 0.0) / target)
    itl_p99_s, itl_ratio = _latency(observation.itl, policy.itl_p99_slo_s)
    ttft_p99_s, ttft_ratio = _latency(observation.ttft, policy.ttft_p99_slo_s)
    unproven: list[tuple[str, float, float]] = []
    if proven_only:
        for name, quantile, slo_s in (
            ("ITL", observation.itl, policy.itl_p99_slo_s),
            ("TTFT", observation.ttft, policy.ttft_p99_slo_s),
        ):
            if _unproven(quantile, slo_s) and quantile is not None:
                assert quantile.lower_bound_s is not None and quantile.upper_bound_s is not None
                unproven.append((name, quantile.lower_bound_s, quantile.upper_bound_s))
        # An unproven reading counts at its SLO: at target, no breach.
        names = {name for name, _, _ in unproven}
        itl_ratio = 1.0 if "ITL" in names else itl_ratio
        ttft_ratio = 1.0 if "TTFT" in names else ttft_ratio
    return Signals(
        ready_replicas=observation.ready_replicas,
        starting_replicas=max(0, observation.desired_replicas - observation.ready_replicas),
        num_pods_scraped=scraped,
        queue_per_replica=queue_per_replica,
        queue_ratio=queue_ratio,
        queue_spike_ratio=spike_ratio,
        itl_p99_s=itl_p99_s,
        itl_ratio=itl_ratio,
        ttft_p99_s=ttft_p99_s,
        ttft_ratio=ttft_ratio,
        kv_cache_usage=observation.kv_cache_usage,
        unproven=tuple(unproven),
    )


def _unproven(quantile: LatencyQuantile | None, slo_s: float | None) -> bool:
    """Whether `quantile` reads over `slo_s` only by interpolation inside a bucket that holds
    the SLO."""
    if quantile is None or slo_s is None or not quantile.valid or quantile.idle:
        return False
    return quantile.p99_s > slo_s and quantile.straddles(slo_s)


def _latency(
    quantile: LatencyQuantile | None, slo_s: float | None
) -> tuple[float | None, float | None]:
    if quantile is None or not quantile.valid:
        return None, None
    if quantile.idle:
        return None, (0.0 if slo_s is not None else None)
    return quantile.p99_s, (quantile.p99_s / slo_s if slo_s is not None else None)


def _missing(policy: AutoscalePolicy, observation: Observation) -> list[str]:
    if observation.num_pods_scraped == 0:
        return [f"any of the {observation.num_pods_expected} ready pods"]
    missing = []
    for name, value in (
        ("num_requests_waiting", observation.num_requests_waiting),
        ("num_requests_running", observation.num_requests_running),
    ):
        if value is None or not math.isfinite(value):
            missing.append(name)
    for name, quantile, slo_s in (
        ("P99 ITL", observation.itl, policy.itl_p99_slo_s),
        ("P99 TTFT", observation.ttft, policy.ttft_p99_slo_s),
    ):
        if slo_s is not None and (quantile is None or not quantile.valid):
            missing.append(name)
    return missing


def _to_bounds(
    policy: AutoscalePolicy, history: History, signals: Signals, current: int, now_s: float
) -> Decision:
    desired = policy.clamp(current)
    if desired > current:
        return Decision(
            desired,
            Mode.scale_up,
            Reason.below_min,
            f"{current} replicas is below minReplicas {policy.min_replicas}",
            signals,
            replace(history, calm_since_s=None, last_scale_up_s=now_s),
        )
    return Decision(
        desired,
        Mode.scale_down,
        Reason.above_max,
        f"{current} replicas is above maxReplicas {policy.max_replicas}",
        signals,
        replace(history, breach_since_s=None, calm_since_s=None, last_scale_down_s=now_s),
    )


def _too_soon_after_a_step_down(
    policy: AutoscalePolicy,
    now_s: float,
    current: int,
    lead: str,
    signals: Signals,
    history: History,
) -> Decision | None:
    """Steady, if the last step down was less than scale_down_step_interval_s ago (both ways
    down, the window's and the model's, wait the same interval between steps)."""
    last_s = history.last_scale_down_s
    since_step_s = math.inf if last_s is None else now_s - last_s
    if since_step_s >= policy.scale_down_step_interval_s:
        return None
    return Decision(
        current,
        Mode.steady,
        Reason.stabilizing,
        f"{lead} last step down {since_step_s:.0f} s ago, next after "
        f"{policy.scale_down_step_interval_s:g} s",
        signals,
        history,
    )


def _hold(code: Reason, words: str, current: int, signals: Signals, history: History) -> Decision:
    # Blind evaluations break both runs and the queue's pair of readings: a window must be
    # observed end to end to count.
    return Decision(
        current,
        Mode.hold,
        code,
        words,
        signals,
        replace(history, breach_since_s=None, calm_since_s=None, last_queue_per_replica=None),
    )


def _blind_to_a_step_down(
    observation: Observation, figures: str, signals: Signals, history: History
) -> Decision | None:
    """A hold while some pods could not be read: what they carry is unknown, so no step down."""
    unseen = observation.num_pods_expected - observation.num_pods_scraped
    if unseen <= 0:
        return None
    why = "; ".join(observation.problems) or "no answer"
    return _hold(
        Reason.partial_scrape,
        f"{figures} on {observation.num_pods_scraped} of {observation.num_pods_expected} "
        f"pods; {unseen} could not be read ({why}); not scaling down while blind",
        observation.desired_replicas,
        signals,
        history,
    )


def _scale_up(
    policy: AutoscalePolicy,
    history: History,
    observation: Observation,
    signals: Signals,
    now_s: float,
    model: ModelNeed | None = None,
) -> Decision:
    current = observation.desired_replicas
    pressure = signals.pressure
    code = _dominant(signals)
    breach_since_s = now_s if history.breach_since_s is None else history.breach_since_s
    serving = max(observation.ready_replicas, observation.num_pods_expected)
    needed = math.ceil(serving * pressure - _EPSILON)
    if model is not None and model.replicas > needed:
        # The breach is the feedback; the model's forecast may already ask for more.
        needed = model.replicas
    panic = pressure >= policy.panic_ratio
    figures = _describe(policy, signals)
    waiting = replace(history, breach_since_s=breach_since_s, calm_since_s=None)

    if needed <= current:
        return Decision(
            current,
            Mode.hold,
            Reason.capacity_starting,
            f"{figures}: {serving} ready replicas need {needed}, and the "
            f"{signals.starting_replicas} starting ones already make {current}; "
            "waiting for them to become ready",
            signals,
            waiting,
        )
    if current >= policy.max_replicas:
        return Decision(
            current,
            Mode.hold,
            Reason.at_max,
            f"{figures}: {needed} replicas needed but maxReplicas is {policy.max_replicas}",
            signals,
            waiting,
        )
    breach_s = now_s - breach_since_s
    if not panic and breach_s < policy.scale_up_stabilization_s:
        return Decision(
            current,
            Mode.hold,
            Reason.confirming,
            f"{figures}: over target for {breach_s:.1f} s of the "
            f"{policy.scale_up_stabilization_s:g} s scale-up window",
            signals,
            waiting,
        )
    step_limit = max(policy.max_scale_up_step, current) if panic else policy.max_scale_up_step
    desired = min(needed, current + step_limit, policy.max_replicas)
    limits = []
    if desired < needed:
        limits.append(
            f"capped at {desired} by "
            + ("maxReplicas" if desired == policy.max_replicas else f"a step of {step_limit}")
        )
    if observation.num_pods_scraped < observation.num_pods_expected:
        limits.append(f"seen on {observation.num_pods_scraped} of {serving} pods")
    tail = f" ({'; '.join(limits)})" if limits else ""
    return Decision(
        desired,
        Mode.panic if panic else Mode.scale_up,
        code,
        f"{figures}: {pressure:.2f}x target, {serving} ready replicas need {needed}; "
        f"scaling {current} -> {desired}{tail}",
        signals,
        replace(waiting, last_scale_up_s=now_s),
    )


def _scale_down(
    policy: AutoscalePolicy,
    history: History,
    observation: Observation,
    signals: Signals,
    now_s: float,
    bound: str | None = None,
    model: ModelNeed | None = None,
) -> Decision:
    """Step down if the smaller fleet stays within targets. With `bound` (the words of a TTFT
    breach set by prompt length) every outcome but a step down is a `PrefillBound` hold.
    With a model, its forecast decides the size; the measurements only veto a step down."""
    if model is not None:
        return _model_step(policy, history, observation, signals, now_s, model, bound)
    current = observation.desired_replicas
    figures = _describe(policy, signals)
    # A prompt-bound TTFT is over its SLO: say so instead of "within targets".
    state = "within targets" if bound is None else "keeping the replicas"
    if bound is not None:
        figures = f"{figures}: {bound}"
    if blind := _blind_to_a_step_down(observation, figures, signals, history):
        return blind
    step = min(policy.max_scale_down_step, current - policy.min_replicas)
    within = replace(history, breach_since_s=None, calm_since_s=None)
    if step <= 0:
        return Decision(
            current,
            Mode.steady,
            Reason.within_targets,
            f"{figures}: {state} at minReplicas {policy.min_replicas}",
            signals,
            within,
        )
    short = _short_after_step(policy, observation, current - step)
    if short:
        return Decision(
            current,
            Mode.steady,
            Reason.within_targets,
            f"{figures}: {state}, but on {current - step} replicas {short}",
            signals,
            within,
        )
    calm_since_s = now_s if history.calm_since_s is None else history.calm_since_s
    window_start_s = max(calm_since_s, now_s - policy.scale_down_stabilization_s)
    floors = (
        *((at_s, n) for at_s, n in history.calm_floors if at_s >= window_start_s),
        (now_s, _fewest_within_targets(policy, observation, current - step)),
    )
    calm = replace(history, breach_since_s=None, calm_since_s=calm_since_s, calm_floors=floors)
    calm_s = now_s - calm_since_s
    if calm_s < policy.scale_down_stabilization_s:
        return Decision(
            current,
            Mode.steady,
            Reason.stabilizing,
            f"{figures}: headroom for {calm_s:.0f} s of the "
            f"{policy.scale_down_stabilization_s:g} s scale-down window",
            signals,
            calm,
        )
    too_soon = _too_soon_after_a_step_down(policy, now_s, current, f"{figures}:", signals, calm)
    if too_soon is not None:
        return too_soon
    floor = max(n for _, n in floors)
    desired = max(floor, current - step)
    if desired >= current:
        return Decision(
            current,
            Mode.steady,
            Reason.stabilizing,
            f"{figures}: {state}, but the busiest reading of the last "
            f"{policy.scale_down_stabilization_s:g} s needs {floor} replicas",
            signals,
            calm,
        )
    return Decision(
        desired,
        Mode.scale_down,
        Reason.sustained_headroom,
        f"{figures}: {desired} replicas would "
        + ("stay within targets" if bound is None else "still give every request its own engine")
        + f" at every reading of the last {calm_s:.0f} s; scaling {current} -> {desired}",
        signals,
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


@dataclass(frozen=True, slots=True)
class ModelNeed:
    """The replicas the step model says the forecast demand needs, and the words why."""

    replicas: int
    words: str
    # The forecast has seen a whole scale-down window: only then may it claim that window's
    # busiest interval, and so a smaller fleet.
    can_shrink: bool
    seen_s: float


def _model_need(
    policy: AutoscalePolicy,
    outlook: Forecast | None,
    watched_s: float | None = None,
    slowness: float = 1.0,
) -> ModelNeed | None:
    model = policy.replica_model
    if model is None or outlook is None:
        return None
    if slowness > 1.0:
        model = model.slowed(slowness)
    demand = outlook.demand
    replicas, verdict = model.replicas_needed(demand, policy.max_replicas)
    sized = replicas
    record = ""
    if outlook.record_jump > 1.0:
        # Keep up with a burst as far beyond the forecast as this service's records went.
        burst, burst_verdict = model.replicas_needed(
            outlook.burst, policy.max_replicas, keep_up_only=True
        )
        if burst > replicas:
            replicas, verdict = burst, burst_verdict
            record = (
                f", {burst} to keep up with a burst {approx(outlook.record_jump)}x that "
                f"(the records of the last {MAX_MEMORY_S / 60:.0f} min)"
            )
    replicas = policy.clamp(replicas)
    limit = "" if verdict.ok else f" ({verdict.why} even then)"
    words = (
        f"forecast {approx(demand.prompt_tokens_per_s)} prompt and "
        f"{approx(demand.output_tokens_per_s)} output tokens/s "
        f"(busiest {policy.attainment:.0%} of the last {outlook.span_s:.0f} s"
        + (
            f" on the load of now, which {_trend_words(outlook)}"
            if outlook.memory_trend_prompt_tokens_per_s2
            else ""
        )
        + (
            f", +{approx(outlook.growth_prompt_tokens_per_s)} prompt tokens/s of growth"
            if outlook.growth_prompt_tokens_per_s > 0
            else ""
        )
        + f") need {sized} replicas by the step model"
        + (
            f" at the engines' measured pace, {approx(slowness)}x its price"
            if slowness > 1.0
            else ""
        )
        + f"{record}{limit}"
    )
    # A restored memory lacks the load of the time between its last write and the restart,
    # which the fleet in place was sized on: the forecast claims no smaller fleet until this
    # process has seen a window of its own.
    seen_s = outlook.span_s if watched_s is None else min(outlook.span_s, watched_s)
    return ModelNeed(replicas, words, seen_s >= policy.scale_down_stabilization_s, seen_s)


def _trend_words(outlook: Forecast) -> str:
    slope = outlook.memory_trend_prompt_tokens_per_s2
    way = "rose" if slope > 0 else "fell"
    return f"{way} {approx(abs(slope) * outlook.span_s)} prompt tokens/s over it"


def _model_step(
    policy: AutoscalePolicy,
    history: History,
    observation: Observation,
    signals: Signals,
    now_s: float,
    model: ModelNeed,
    bound: str | None,
) -> Decision:
    """No breach: size the fleet to the model's forecast. Up at once (capacity takes a whole
    startup to arrive); down to the forecast's size only with every pod visible, the queue
    spread over the smaller fleet under the scale-down ratio, and one metrics window since
    the last step down."""
    current = observation.desired_replicas
    figures = _describe(policy, signals)
    if bound is not None:
        figures = f"{figures}: {bound}"
    quiet = replace(history, breach_since_s=None, calm_since_s=None)
    if model.replicas > current:
        step_limit = max(policy.max_scale_up_step, current)
        desired = min(model.replicas, current + step_limit, policy.max_replicas)
        if desired <= current:
            return Decision(
                current, Mode.hold, Reason.at_max, f"{figures}; {model.words}", signals, quiet
            )
        return Decision(
            desired,
            Mode.scale_up,
            Reason.predicted_demand,
            f"{figures}; {model.words}; scaling {current} -> {desired}",
            signals,
            replace(quiet, last_scale_up_s=now_s),
        )
    if model.replicas == current:
        return Decision(
            current, Mode.steady, Reason.within_targets, f"{figures}; {model.words}", signals, quiet
        )
    if not model.can_shrink:
        return Decision(
            current,
            Mode.steady,
            Reason.stabilizing,
            f"{figures}; {model.words}, but the forecast has seen {model.seen_s:.0f} s of the "
            f"{policy.scale_down_stabilization_s:g} s scale-down window: keeping {current}",
            signals,
            quiet,
        )
    if blind := _blind_to_a_step_down(observation, figures, signals, history):
        return blind
    desired = model.replicas
    waiting = observation.num_requests_waiting or 0.0
    queue_after = waiting / max(1, desired)
    if queue_after > policy.scale_down_ratio * policy.target_queue_per_replica:
        return Decision(
            current,
            Mode.steady,
            Reason.within_targets,
            f"{figures}; {model.words}, but the queue would be {queue_after:.1f}/replica, over "
            f"{policy.scale_down_ratio:g}x its target",
            signals,
            quiet,
        )
    too_soon = _too_soon_after_a_step_down(
        policy, now_s, current, f"{figures}; {model.words};", signals, quiet
    )
    if too_soon is not None:
        return too_soon
    return Decision(
        desired,
        Mode.scale_down,
        Reason.model_headroom,
        f"{figures}; {model.words}; scaling {current} -> {desired}",
        signals,
        replace(quiet, last_scale_down_s=now_s),
    )


def _prefill_hold(decision: Decision) -> Decision:
    """A TTFT breach replicas cannot fix: keep a step up, a step down or a partial-view hold
    as decided; turn every other outcome into a `PrefillBound` hold (the calm window keeps
    running). A step down stays one, with or without a capacity model: the breach is each
    prompt's own prefill on an engine of its own, which no fleet size changes, and the step
    down says so in its words."""
    if decision.mode in (Mode.scale_up, Mode.scale_down) or (
        decision.reason_code is Reason.partial_scrape
    ):
        return decision
    return replace(decision, mode=Mode.hold, reason_code=Reason.prefill_bound)


def _solo(observation: Observation, num_engines: int) -> bool:
    """Whether `num_engines` engines give every request in flight one of its own: the
    least-outstanding balancer sends an arrival to an idle engine first, so with no more
    requests in flight than engines every step carries one sequence whatever the fleet size
    (a request waiting then has just arrived at an idle engine)."""
    waiting = observation.num_requests_waiting or 0.0
    running = observation.num_requests_running or 0.0
    return running + waiting <= num_engines


def _prefill_bound(
    policy: AutoscalePolicy, observation: Observation, signals: Signals
) -> str | None:
    """The words for a TTFT breach set by prompt length, or None if more replicas may help.

    Only the TTFT is over its SLO and every request in flight has an engine to itself: its
    TTFT is its own prefill, which no replica count shortens. A TTFT from load shows as
    engines shared (prefills splitting one token budget, requests queued behind others).
    """
    if signals.ttft_ratio is None or signals.ttft_ratio <= 1.0 or signals.ttft_p99_s is None:
        return None
    if (signals.itl_ratio or 0.0) > 1.0:
        return None
    if observation.num_pods_scraped == 0 or not _solo(observation, observation.num_pods_scraped):
        return None
    in_flight = (observation.num_requests_running or 0.0) + (
        observation.num_requests_waiting or 0.0
    )
    return (
        f"P99 TTFT {approx(signals.ttft_p99_s)} s over the {policy.ttft_p99_slo_s:g} s SLO with "
        f"{approx(in_flight / observation.num_pods_scraped)} requests in flight per replica: each "
        "has an engine to itself, so its TTFT is its own prefill, set by prompt length; more "
        "replicas cannot shorten one prefill"
    )


def _short_after_step(
    policy: AutoscalePolicy, observation: Observation, replicas_after: int
) -> str | None:
    """Why the fleet on `replicas_after` replicas could break a target, or None if it would not.

    Called only with every pod visible and no signal missing.
    """
    waiting = observation.num_requests_waiting or 0.0
    queue_after = waiting / max(1, replicas_after)
    if queue_after > policy.scale_down_ratio * policy.target_queue_per_replica:
        return (
            f"the queue would be {queue_after:.1f}/replica, over "
            f"{policy.scale_down_ratio:g}x its target"
        )
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


def _dominant(signals: Signals) -> Reason:
    candidates = [
        (signals.queue_ratio, Reason.queue_over_target),
        (signals.itl_ratio, Reason.itl_over_slo),
        (signals.ttft_ratio, Reason.ttft_over_slo),
    ]
    return max(
        ((ratio, code) for ratio, code in candidates if ratio is not None),
        key=lambda pair: pair[0],
    )[1]


def _describe(policy: AutoscalePolicy, signals: Signals) -> str:
    parts = []
    if signals.queue_per_replica is not None:
        parts.append(
            f"queue {signals.queue_per_replica:.1f}/replica "
            f"(target {policy.target_queue_per_replica:g})"
        )
    for name, value, slo_s in (
        ("ITL", signals.itl_p99_s, policy.itl_p99_slo_s),
        ("TTFT", signals.ttft_p99_s, policy.ttft_p99_slo_s),
    ):
        if slo_s is None:
            continue
        # Past the blind holds every latency with an SLO was read: no P99 is an idle window.
        shown = "idle" if value is None else f"{approx(value)} s"
        doubt = "".join(
            f"; its bucket {lo:g}-{hi:g} s holds the SLO: not provably over"
            for unproven, lo, hi in signals.unproven
            if unproven == name
        )
        parts.append(f"P99 {name} {shown} (SLO {slo_s:g} s{doubt})")
    return ", ".join(parts)
