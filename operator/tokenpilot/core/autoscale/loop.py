"""One service's autoscaler as a pure state machine: the only autoscaling loop there is.

    step(state, samples, current, now) -> (state, decision, actions)

Three parts, composed here and nowhere else:

    observe   the scrapes into each pod's ring, and an Observation     core.autoscale.window
    plan      the load and the engines' pace remembered; the fleet     core.autoscale.plan
              the step model sizes for the forecast
    feedback  the SLO signals against their targets, bounded: the      core.autoscale.algorithm
              Decision
    report    status, conditions and Events of the decision            core.autoscale.report

`state` is what the autoscaler remembers of one service between evaluations; `samples` is what
the metrics source read this time: the scrapes of the Ready pods (`PodScrapes`, the direct
source) or an `Observation` a Prometheus server windowed itself. `current` is what the cluster
says (spec.replicas, Ready pods, the object's generation and conditions), `now` the clock's two
readings. `step` returns the next state, the decision, and the actions to carry out, in order:

    ScaleTo       write spec.replicas through the scale subresource
    PostEvent     post an Event of the report
    ApplyStatus   apply what the autoscaler owns in status, when a reader would notice
                  (core.autoscale.freshness)

The operator's handler reads, calls `step`, and carries the actions out through the kube
adapters; the fleet simulator calls the same `step` in virtual time and applies `ScaleTo` to
its replicas. Neither keeps any autoscaling state of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tokenpilot.core.autoscale.algorithm import Evidence, decide
from tokenpilot.core.autoscale.costs import engine_pace
from tokenpilot.core.autoscale.decision import Decision
from tokenpilot.core.autoscale.freshness import should_write
from tokenpilot.core.autoscale.observation import Current, History, Now, Observation
from tokenpilot.core.autoscale.pace import PaceMemory
from tokenpilot.core.autoscale.plan import (
    DemandMemory,
    StartupMemory,
    forecast_span,
    load_point,
    need,
)
from tokenpilot.core.autoscale.policy import METRICS_WINDOW_S, AutoscalePolicy
from tokenpilot.core.autoscale.report import invalid_spec_status, report
from tokenpilot.core.autoscale.window import PodScrapes, Ring, observe_scrapes
from tokenpilot.core.autoscale.workload import WorkloadMemory
from tokenpilot.core.service_event import ServiceEvent

Samples = PodScrapes | Observation


@dataclass(frozen=True, slots=True)
class ScaleTo:
    spec_replicas: int
    replicas: int


@dataclass(frozen=True, slots=True)
class PostEvent:
    event: ServiceEvent


@dataclass(frozen=True, slots=True)
class ApplyStatus:
    owned: dict[str, Any]


Action = ScaleTo | PostEvent | ApplyStatus


@dataclass(frozen=True, slots=True)
class ServiceState:
    """One service's autoscaler between evaluations; start from `ServiceState(policy)`.

    `interval_s` is how often it is evaluated; the policy may change between steps (a new
    spec) with `replace(state, policy=...)`. The forecast's horizon and lookback follow the
    start-ups `startups` has seen (the policy's `startup_s` until then).
    """

    policy: AutoscalePolicy
    interval_s: float = 5.0
    window_s: float = METRICS_WINDOW_S
    rings: Mapping[str, Ring] = field(default_factory=dict)
    startups: StartupMemory = field(default_factory=StartupMemory)
    demand: DemandMemory = field(default_factory=DemandMemory)
    pace: PaceMemory = field(default_factory=PaceMemory)
    workload: WorkloadMemory = field(default_factory=WorkloadMemory)
    history: History = field(default_factory=History)
    applied: Mapping[str, Any] | None = None
    # When `applied` was applied (monotonic seconds); None before the first apply.
    applied_at_s: float | None = None
    # Evaluations that read at least one pod. A P99 is a rate over two readings, so until the
    # second one a missing P99 is expected from any source (a Prometheus server's rate() too):
    # AwaitingSecondScrape, never a MissingMetrics Warning.
    num_reading_evaluations: int = 0


def step(
    state: ServiceState, samples: Samples, current: Current, now: Now
) -> tuple[ServiceState, Decision, tuple[Action, ...]]:
    """One evaluation of one service; see the module docstring. Pure."""
    rings, observation = _observe(state, samples, current)
    num_reading = state.num_reading_evaluations + (observation.num_pods_scraped > 0)
    if observation.num_pods_scraped > 0 and num_reading < 2:
        observation = replace(observation, awaiting_second_scrape=True)

    policy = state.policy
    startups = state.startups.add(current.pod_startups_s)
    span = forecast_span(policy, state.interval_s, startups.startup_s(policy.startup_s))
    point = load_point(observation)
    demand = state.demand.add(point, span)
    pace = state.pace.add(
        policy.replica_model,
        None if point is None else observation.load,
        demand.outlook,
        at_s=observation.observed_at_s,
        lookback_s=span.lookback_s,
    )
    workload = state.workload.add(
        None if point is None or observation.load is None else observation.load.served,
        observation.observed_at_s,
        0.0 if point is None else point.interval_s,
    )
    evidence = Evidence(observation, need(policy, demand, pace, now.monotonic_s))
    decision = decide(policy, state.history, evidence, now.monotonic_s)

    model = policy.replica_model
    told = report(
        state.applied,
        current,
        decision,
        problems=observation.problems,
        pace=None if model is None else engine_pace(model, pace.costs, span.lookback_s),
        workload=workload.learned(),
        costs=pace.costs if model is not None else None,
        costs_window_s=span.lookback_s,
        now=now,
    )
    actions: list[Action] = []
    if decision.desired_replicas != current.spec_replicas:
        actions.append(ScaleTo(current.spec_replicas, decision.desired_replicas))
    actions.extend(PostEvent(event) for event in told.events)
    applied, applied_at_s = state.applied, state.applied_at_s
    since_s = None if applied_at_s is None else now.monotonic_s - applied_at_s
    if should_write(state.applied, told.owned, since_applied_s=since_s):
        actions.append(ApplyStatus(told.owned))
        applied, applied_at_s = told.owned, now.monotonic_s
    next_state = replace(
        state,
        rings=rings,
        startups=startups,
        demand=demand,
        pace=pace,
        workload=workload,
        history=decision.history,
        applied=applied,
        applied_at_s=applied_at_s,
        num_reading_evaluations=num_reading,
    )
    return next_state, decision, tuple(actions)


def _observe(
    state: ServiceState, samples: Samples, current: Current
) -> tuple[Mapping[str, Ring], Observation]:
    """The rings with this evaluation's scrapes, and the service as they show it with the
    cluster's replica counts."""
    if isinstance(samples, PodScrapes):
        return observe_scrapes(
            state.rings,
            samples,
            spec_replicas=current.spec_replicas,
            ready_replicas=current.ready_replicas,
            window_s=state.window_s,
        )
    observed = replace(
        samples, spec_replicas=current.spec_replicas, ready_replicas=current.ready_replicas
    )
    return state.rings, observed


def unusable_spec(
    state: ServiceState, replicas: int, words: str, now: Now
) -> tuple[ServiceState, tuple[Action, ...]]:
    """A spec the autoscaler cannot use: keep the replicas and say so in status."""
    owned = invalid_spec_status(state.applied, replicas, words, now)
    if owned == state.applied:
        return state, ()
    return replace(state, applied=owned, applied_at_s=now.monotonic_s), (ApplyStatus(owned),)
