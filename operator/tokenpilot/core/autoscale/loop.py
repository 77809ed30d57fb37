"""One service's autoscaler as a pure state machine: the only autoscaling loop there is.

    step(state, samples, current, now) -> (state, decision, actions)

`state` is everything the autoscaler remembers of one service between evaluations: the
policy, each pod's ring of scrapes, the load of the forecast's memory, the last hour's jumps
over the forecast (core.autoscale.demand: records), the engines' measured step over the
model's price (core.autoscale.correction), the decision's history and the status it last
applied. `samples` is what the metrics source read this time: the
scrapes of the Ready pods (`PodScrapes`, the direct source) or an `Observation` a Prometheus
server windowed itself. `current` is what the cluster says (spec.replicas, Ready pods, the
object's generation and conditions), `now` the clock's two readings. `step` returns the next
state, the decision, and the actions to carry out, in order:

    ScaleTo       write spec.replicas through the scale subresource
    PostEvent     post the Event (replicas moved, newly blind in a way the user can fix, or
                  the engines newly found slower than their profile)
    ApplyStatus   apply what the autoscaler owns in status (only when it changed)

The operator's handler reads, calls `step`, and carries the actions out through the kube
adapters; the fleet simulator calls the same `step` in virtual time and applies `ScaleTo` to
its replicas. Neither keeps any autoscaling state of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tokenpilot.api.llmservice import Condition
from tokenpilot.core import conditions as cond
from tokenpilot.core.autoscale.algorithm import decide
from tokenpilot.core.autoscale.correction import (
    PaceReading,
    engine_pace,
    engine_slowness,
    measured_pace,
    pace_reading,
)
from tokenpilot.core.autoscale.decision import Decision, Mode
from tokenpilot.core.autoscale.demand import (
    Forecast,
    Jump,
    LoadPoint,
    forecast,
    jump,
    memory_s,
    remember,
    remember_jump,
)
from tokenpilot.core.autoscale.observation import History, Observation
from tokenpilot.core.autoscale.policy import METRICS_WINDOW_S, AutoscalePolicy
from tokenpilot.core.autoscale.window import PodScrapes, Ring, observe_scrapes
from tokenpilot.core.events import ServiceEvent, pace_event, scale_event
from tokenpilot.core.status import autoscaler_status, metrics_condition, pace_condition

Samples = PodScrapes | Observation


@dataclass(frozen=True, slots=True)
class Current:
    """What the cluster says at this evaluation."""

    spec_replicas: int
    ready_replicas: int
    generation: int = 0
    conditions: Sequence[Condition] = ()


@dataclass(frozen=True, slots=True)
class Now:
    """The clock, read once: monotonic seconds for windows, RFC 3339 text for status."""

    monotonic_s: float
    wall: str


@dataclass(frozen=True, slots=True)
class ScaleTo:
    from_replicas: int
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
    spec) with `replace(state, policy=...)`.
    """

    policy: AutoscalePolicy
    interval_s: float = 5.0
    window_s: float = METRICS_WINDOW_S
    rings: Mapping[str, Ring] = field(default_factory=dict)
    load: tuple[LoadPoint, ...] = ()
    # Each interval's prompt rate over the forecast in force when it came, kept longer than
    # `load` (core.autoscale.demand: records), and that forecast.
    jumps: tuple[Jump, ...] = ()
    outlook: Forecast | None = None
    history: History = field(default_factory=History)
    applied: Mapping[str, Any] | None = None
    # Evaluations that read at least one pod. A P99 is a rate over two readings, so until the
    # second one a missing P99 is expected from any source (a Prometheus server's rate() too):
    # AwaitingSecondScrape, never a MissingMetrics Warning.
    num_reading_evaluations: int = 0
    # When `load` and `jumps` were restored from a memory written by an earlier process
    # (core.autoscale.memory), on this process's clock; None for a memory of its own. And
    # when, where that memory had a hole, jumps over the forecast are measured again.
    restored_at_s: float | None = None
    jumps_resume_at_s: float | None = None
    # The engines' mean step against the step model's price of it, in each interval of the
    # forecast's memory that priced one (core.autoscale.correction.pace_reading).
    pace_readings: tuple[PaceReading, ...] = ()


def step(
    state: ServiceState, samples: Samples, current: Current, now: Now
) -> tuple[ServiceState, Decision, tuple[Action, ...]]:
    """One evaluation of one service; see the module docstring. Pure."""
    rings: Mapping[str, Ring] = state.rings
    if isinstance(samples, PodScrapes):
        rings, observation = observe_scrapes(
            state.rings,
            samples,
            desired_replicas=current.spec_replicas,
            ready_replicas=current.ready_replicas,
            window_s=state.window_s,
        )
    else:
        observation = replace(
            samples,
            desired_replicas=current.spec_replicas,
            ready_replicas=current.ready_replicas,
        )
    num_reading = state.num_reading_evaluations + (observation.num_pods_scraped > 0)
    if observation.num_pods_scraped > 0 and num_reading < 2:
        observation = replace(observation, awaiting_second_scrape=True)
    load = state.load
    jumps = state.jumps
    readings = state.pace_readings
    counted = None
    # How long this process has watched a service whose memory it restored (None: its own).
    watched_s = None if state.restored_at_s is None else now.monotonic_s - state.restored_at_s
    # A NaN or infinite counter (a Prometheus that lies, an engine that exports garbage) is no
    # reading: remembered, it would poison the forecast for the whole memory.
    if observation.load is not None and observation.load.is_finite:
        counted = observation.load
        point = LoadPoint(
            observation.observed_at_s,
            counted.interval_s,
            max(0.0, counted.num_prompt_tokens - counted.num_cached_prompt_tokens),
            counted.num_output_tokens,
            counted.num_requests,
            observation.num_requests_waiting or 0.0,
        )
        lookback_s = memory_of(state)
        # A memory restored with a hole in it (written well before the restart) lacks that
        # time's load; a jump over a forecast without it would be a record the load never set.
        resume_s = state.jumps_resume_at_s
        measured = (
            jump(
                state.outlook,
                point,
                memory_s=lookback_s,
                waiting_before=load[-1].waiting if load else point.waiting,
            )
            if resume_s is None or point.at_s >= resume_s
            else None
        )
        jumps = remember_jump(jumps, measured, point.at_s)
        load = remember(load, point, lookback_s)
        readings = tuple(r for r in readings if r.at_s > point.at_s - lookback_s)
    outlook = _forecast(state, load, jumps)
    model = state.policy.replica_model
    if counted is not None and model is not None and outlook is not None:
        reading = pace_reading(model, counted, outlook.demand, observation.observed_at_s)
        if reading is not None:
            readings = (*readings, reading)
    pace = measured_pace(readings)
    decision = decide(
        state.policy,
        state.history,
        observation,
        now.monotonic_s,
        outlook,
        watched_s,
        engine_slowness(pace),
    )
    actions: list[Action] = []
    if decision.desired_replicas != current.spec_replicas:
        actions.append(ScaleTo(current.spec_replicas, decision.desired_replicas))
    previous = (state.applied or {}).get("autoscaling") or {}
    event = scale_event(current.spec_replicas, decision, previous.get("reasonCode"))
    if event is not None:
        actions.append(PostEvent(event))
    known = _applied_conditions(state.applied) or current.conditions
    conditions = [
        metrics_condition(
            known,
            decision,
            problems=observation.problems,
            generation=current.generation,
            now=now.wall,
        )
    ]
    if model is not None:
        as_profiled = engine_pace(model, pace, memory_of(state))
        before = cond.find(known, cond.PACE_AS_PROFILED)
        conditions.append(
            pace_condition(known, as_profiled, generation=current.generation, now=now.wall)
        )
        warning = pace_event(None if before is None else before.reason, as_profiled)
        if warning is not None:
            actions.append(PostEvent(warning))
    owned = autoscaler_status(
        state.applied,
        desired_replicas=decision.desired_replicas,
        mode=decision.mode.value,
        reason_code=decision.reason_code.value,
        reason=decision.reason,
        conditions=conditions,
        now=now.wall,
    )
    applied = state.applied
    if owned != state.applied:
        actions.append(ApplyStatus(owned))
        applied = owned
    next_state = replace(
        state,
        rings=rings,
        load=load,
        jumps=jumps,
        outlook=outlook,
        history=decision.history,
        applied=applied,
        num_reading_evaluations=num_reading,
        pace_readings=readings,
    )
    return next_state, decision, tuple(actions)


def memory_of(state: ServiceState) -> float:
    """How long the state's forecast remembers load (core.autoscale.demand.memory_s)."""
    return memory_s(
        scale_down_window_s=state.policy.scale_down_stabilization_s,
        startup_s=state.policy.startup_s,
        interval_s=state.interval_s,
        attainment=state.policy.attainment,
    )


def with_outlook(state: ServiceState) -> ServiceState:
    """`state` with the forecast of its own load and records (a restored memory's)."""
    return replace(state, outlook=_forecast(state, state.load, state.jumps))


def _forecast(
    state: ServiceState, load: Sequence[LoadPoint], jumps: Sequence[Jump]
) -> Forecast | None:
    return forecast(
        load,
        horizon_s=state.policy.startup_s + state.interval_s,
        attainment=state.policy.attainment,
        jumps=jumps,
    )


def unusable_spec(
    state: ServiceState, replicas: int, words: str, now: Now
) -> tuple[ServiceState, tuple[Action, ...]]:
    """A spec the autoscaler cannot use: keep the replicas and say so in status."""
    owned = autoscaler_status(
        state.applied,
        desired_replicas=replicas,
        mode=Mode.hold.value,
        reason_code="InvalidSpec",
        reason=f"autoscaling spec unusable: {words}",
        conditions=(),
        now=now.wall,
    )
    if owned == state.applied:
        return state, ()
    return replace(state, applied=owned), (ApplyStatus(owned),)


def _applied_conditions(applied: Mapping[str, Any] | None) -> list[Condition]:
    return [Condition.model_validate(c) for c in (applied or {}).get("conditions", [])]
