"""decide() without a breach: size to the plan's need where a capacity model sizes the fleet,
else step down on sustained headroom (core.autoscale.algorithm, 5); and the two tests both
share: whether every request in flight has an engine to itself, and what a smaller fleet would
break."""

from __future__ import annotations

from dataclasses import replace

from tokenpilot.core.autoscale.case import Case, blind_to_a_step_down, bounded, held
from tokenpilot.core.autoscale.decision import Decision, Mode, PrefillBound, Reason, Signals
from tokenpilot.core.autoscale.figures import approx
from tokenpilot.core.autoscale.observation import Observation
from tokenpilot.core.autoscale.plan import ModelNeed
from tokenpilot.core.autoscale.policy import METRICS_WINDOW_S, AutoscalePolicy
from tokenpilot.core.autoscale.signals import describe


def without_breach(case: Case, bound: PrefillBound | None) -> Decision:
    """No signal over target (or only a TTFT no fleet size shortens, `bound`): size to the
    plan's need where a model sizes the fleet, else step down on sustained headroom."""
    figures = describe(case.policy, case.signals)
    if case.need is not None:
        return _size_to_need(case, case.need, figures if bound is None else f"{figures}: {bound}")
    return _step_down(case, figures, bound)


def _size_to_need(case: Case, need: ModelNeed, figures: str) -> Decision:
    """Up at once (capacity takes a whole startup to arrive); down only with every pod
    visible, the queue spread over the smaller fleet under the scale-down ratio, and a forecast
    that has seen a whole scale-down window."""
    policy, current = case.policy, case.current
    quiet = replace(case.history, breach_since_s=None, calm_since_s=None)
    lead = f"{figures}; {need.words}"
    if need.replicas > current and not need.can_grow:
        return case.decision(
            current,
            Mode.steady,
            Reason.within_targets,
            f"{lead}, but the forecast rests on {need.seen_s:.0f} s of load, under the "
            f"{METRICS_WINDOW_S:g} s window it needs to ask for more: keeping {current}",
            quiet,
        )
    if need.replicas > current:
        desired = bounded(case, need.replicas, max(policy.max_scale_up_step, current)).replicas
        if desired <= current:
            return case.decision(
                current, Mode.hold, Reason.at_max, lead, replace(quiet, last_short_s=case.now_s)
            )
        return case.decision(
            desired,
            Mode.scale_up,
            Reason.predicted_demand,
            f"{lead}; scaling {current} -> {desired}",
            replace(quiet, last_short_s=case.now_s),
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
    if blind := blind_to_a_step_down(case, figures):
        return blind
    if crowded := _queue_after(policy, case.seen, need.replicas):
        return case.decision(
            current, Mode.steady, Reason.within_targets, f"{lead}, but {crowded}", quiet
        )
    move = bounded(case, need.replicas, current)
    if move.held is not None:
        return held(case, move, f"{lead};", quiet)
    return case.decision(
        move.replicas,
        Mode.scale_down,
        Reason.model_headroom,
        f"{lead}; scaling {current} -> {move.replicas}",
        replace(quiet, last_scale_down_s=case.now_s),
    )


def _step_down(case: Case, figures: str, bound: PrefillBound | None) -> Decision:
    """One step down once the smaller fleet has stayed within targets for the window."""
    policy, history, now_s, current = case.policy, case.history, case.now_s, case.current
    # A prompt-bound TTFT is over its SLO: say so instead of "within targets".
    state = "within targets" if bound is None else "keeping the replicas"
    if bound is not None:
        figures = f"{figures}: {bound}"
    if blind := blind_to_a_step_down(case, figures):
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
    if target.held is not None:
        return held(case, target, f"{figures}:", calm)
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


def solo(observation: Observation, num_engines: int) -> bool:
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
    if observation.num_pods_scraped == 0 or not solo(observation, observation.num_pods_scraped):
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
    if solo(observation, replicas_after):
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
