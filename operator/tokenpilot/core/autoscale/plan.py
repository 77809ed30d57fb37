"""The plan: what the autoscaler remembers of the load, of the engines and of their start-ups,
and the fleet the step model says the forecast needs.

`StartupMemory` holds how long the service's replicas took from created to Ready, as the
cluster reports them: the forecast's horizon is the slowest of the recent ones (a replica
asked for now serves only once it has started), and until one has been seen, the policy's
start-up. `DemandMemory` is each interval's counted load over the lookback, the jumps over the
forecast in force (kept for the records' hour) and the forecast they give
(core.autoscale.demand): a frozen value with `add` (one evaluation's reading), `snapshot` and
`restore` (core.autoscale.memory writes it for a later process; the start-ups are read again
from the pods a new process finds). The engines' pace is remembered beside it
(core.autoscale.pace).

`need` prices the forecast with the replica model, slowed by the measured pace where the
engines run slower than priced, and keeps up with a burst as tall as the service's records:
the replicas the feedback (core.autoscale.algorithm) sizes to when no signal is in breach, and
the least it asks for in a breach.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tokenpilot.core.autoscale.demand import (
    MAX_MEMORY_S,
    Forecast,
    Jump,
    LoadPoint,
    forecast,
    jump,
    lookback_s,
    remember,
    remember_jump,
)
from tokenpilot.core.autoscale.figures import approx, seconds_ago, snapshot_figure
from tokenpilot.core.autoscale.observation import Observation
from tokenpilot.core.autoscale.pace import PaceMemory
from tokenpilot.core.autoscale.policy import METRICS_WINDOW_S, AutoscalePolicy

# The jumps at or under the forecast are kept as one per this many seconds in a snapshot: they
# count only as weight under the records' quantile (demand.record_jump reads at least 1.0).
UNDER_FORECAST_BUCKET_S = 60.0


@dataclass(frozen=True, slots=True)
class ForecastSpan:
    """How far back the forecast remembers load, how far ahead it sizes, and the share of
    requests it sizes for."""

    lookback_s: float
    horizon_s: float
    attainment: float


def forecast_span(policy: AutoscalePolicy, interval_s: float, startup_s: float) -> ForecastSpan:
    """The lookback (core.autoscale.demand.lookback_s) and the horizon (a start-up and an
    evaluation interval) of `policy` evaluated every `interval_s`, its replicas starting in
    `startup_s`."""
    return ForecastSpan(
        lookback_s=lookback_s(
            scale_down_window_s=policy.scale_down_stabilization_s,
            startup_s=startup_s,
            interval_s=interval_s,
            attainment=policy.attainment,
        ),
        horizon_s=startup_s + interval_s,
        attainment=policy.attainment,
    )


# The start-ups remembered: the pods seen most recently, so a rollout's new pods replace the
# old ones' within a fleet's worth.
STARTUPS_KEPT = 8


@dataclass(frozen=True, slots=True)
class StartupMemory:
    """The created-to-Ready seconds of the service's most recently seen Ready pods, by name."""

    seen_s: tuple[tuple[str, float], ...] = ()

    def add(self, pod_startups_s: Mapping[str, float]) -> StartupMemory:
        """This memory with the pods not seen before, the oldest forgotten past the cap."""
        known = {name for name, _ in self.seen_s}
        new = tuple((name, s) for name, s in sorted(pod_startups_s.items()) if name not in known)
        if not new:
            return self
        return StartupMemory((*self.seen_s, *new)[-STARTUPS_KEPT:])

    def startup_s(self, assumed_s: float) -> float:
        """The slowest remembered start-up; `assumed_s` until one has been seen."""
        return max((s for _, s in self.seen_s), default=assumed_s)


def load_point(observation: Observation) -> LoadPoint | None:
    """The interval's load as the forecast counts it, or None where the counters gave no
    reading: none read twice yet, or a NaN or infinite counter (a Prometheus that lies, an
    engine that exports garbage), which remembered would poison the forecast."""
    counted = observation.load
    if counted is None or not counted.is_finite:
        return None
    return LoadPoint(
        observation.observed_at_s,
        counted.interval_s,
        counted.computed_prompt_tokens,
        counted.num_output_tokens,
        counted.num_requests,
        observation.num_requests_waiting or 0.0,
        min(counted.num_cached_prompt_tokens, counted.num_prompt_tokens),
    )


@dataclass(frozen=True, slots=True)
class DemandMemory:
    """The load of the lookback, the records of the last `MAX_MEMORY_S`, and their forecast.

    `restored_at_s`: when it was restored from a snapshot written by an earlier process, on this
    process's clock (None for a memory of its own); `jumps_resume_at_s`: where that snapshot had
    a hole, when jumps over the forecast are measured again."""

    load: tuple[LoadPoint, ...] = ()
    jumps: tuple[Jump, ...] = ()
    outlook: Forecast | None = None
    restored_at_s: float | None = None
    jumps_resume_at_s: float | None = None

    def add(self, point: LoadPoint | None, span: ForecastSpan) -> DemandMemory:
        """This memory with `point` (None: no reading this interval) and the forecast anew."""
        load, jumps = self.load, self.jumps
        if point is not None:
            # A snapshot with a hole lacks that time's load; a jump over a forecast without it
            # would be a record the load never set.
            resume_s = self.jumps_resume_at_s
            measured = (
                jump(
                    self.outlook,
                    point,
                    lookback_s=span.lookback_s,
                    waiting_before=load[-1].waiting if load else point.waiting,
                )
                if resume_s is None or point.at_s >= resume_s
                else None
            )
            jumps = remember_jump(jumps, measured, point.at_s)
            load = remember(load, point, span.lookback_s)
        return replace(self, load=load, jumps=jumps, outlook=_forecast(load, jumps, span))

    def watched_s(self, now_s: float) -> float | None:
        """How long this process has watched a service whose memory it restored (None: the
        memory is its own)."""
        return None if self.restored_at_s is None else now_s - self.restored_at_s

    def snapshot(self, now_s: float) -> dict[str, list[list[float]]]:
        """The load and the jumps as rows of figures, times as ages before `now_s`; the jumps
        at or under the forecast one per `UNDER_FORECAST_BUCKET_S`."""
        return {
            "load": [
                [
                    seconds_ago(now_s, p.at_s),
                    *map(snapshot_figure, (p.interval_s, p.prompt_tokens, p.output_tokens)),
                    *map(snapshot_figure, (p.requests, p.waiting, p.cached_prompt_tokens)),
                ]
                for p in self.load
            ],
            "jumps": [
                [seconds_ago(now_s, j.at_s), snapshot_figure(j.ratio), snapshot_figure(j.requests)]
                for j in _compact(self.jumps)
            ],
        }

    @staticmethod
    def restore(
        load_rows: Sequence[Sequence[float]],
        jump_rows: Sequence[Sequence[float]],
        *,
        now_s: float,
        aged_s: float,
        whole: bool,
        span: ForecastSpan,
    ) -> DemandMemory:
        """The memory of `snapshot`'s rows, each `aged_s` older than written; kept within
        `MAX_MEMORY_S`. Not `whole` (written longer than a takeover before): new jumps are
        measured only once this process has watched a whole lookback."""
        load = sorted(
            (
                LoadPoint(now_s - aged_s - age_s, *rest)
                for age_s, *rest in load_rows
                if aged_s + age_s < MAX_MEMORY_S
            ),
            key=lambda p: p.at_s,
        )
        jumps = sorted(
            (
                Jump(now_s - aged_s - age_s, ratio, requests)
                for age_s, ratio, requests in jump_rows
                if aged_s + age_s < MAX_MEMORY_S
            ),
            key=lambda j: j.at_s,
        )
        return DemandMemory(
            load=tuple(load),
            jumps=tuple(jumps),
            outlook=_forecast(load, jumps, span),
            restored_at_s=now_s,
            jumps_resume_at_s=None if whole else now_s + span.lookback_s,
        )


def _forecast(
    load: Sequence[LoadPoint], jumps: Sequence[Jump], span: ForecastSpan
) -> Forecast | None:
    return forecast(load, horizon_s=span.horizon_s, attainment=span.attainment, jumps=jumps)


@dataclass(frozen=True, slots=True)
class ModelNeed:
    """The replicas the step model says the forecast demand needs, and the words why."""

    replicas: int
    words: str
    # The forecast has seen a whole scale-down window: only then may it claim that window's
    # busiest interval, and so a smaller fleet.
    can_shrink: bool
    seen_s: float
    # The forecast rests on a whole metrics window of load (`METRICS_WINDOW_S`): only then may
    # it ask for a larger fleet. A younger one is an interval or two, which at a start (the
    # first prompt not yet in the prefix cache, the first requests all in flight at once) need
    # not be the load; the SLO signals scale up meanwhile.
    can_grow: bool = True


def need(
    policy: AutoscalePolicy, demand: DemandMemory, pace: PaceMemory, now_s: float
) -> ModelNeed | None:
    """The fleet the replica model sizes for the forecast, at the engines' measured pace, within
    the policy's bounds; None without a model or a forecast."""
    model = policy.replica_model
    outlook = demand.outlook
    if model is None or outlook is None:
        return None
    decode, prefill = pace.costs.factors()
    if (decode, prefill) != (1.0, 1.0):
        model = model.priced_at(decode, prefill)
    replicas, verdict = model.replicas_needed(outlook.demand, policy.max_replicas)
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
    limit = "" if verdict.ok else f" ({verdict.why} even then)"
    words = (
        f"{_forecast_words(policy, outlook)} need {sized} replicas by the step model"
        + _pace_words(decode, prefill)
        + f"{record}{limit}"
    )
    # A restored memory lacks the load of the time between its last write and the restart,
    # which the fleet in place was sized on: the forecast claims no smaller fleet until this
    # process has seen a window of its own.
    watched_s = demand.watched_s(now_s)
    seen_s = outlook.span_s if watched_s is None else min(outlook.span_s, watched_s)
    return ModelNeed(
        policy.clamp(replicas),
        words,
        can_shrink=seen_s >= policy.scale_down_stabilization_s,
        seen_s=seen_s,
        can_grow=outlook.span_s >= METRICS_WINDOW_S,
    )


def _pace_words(decode: float, prefill: float) -> str:
    if (decode, prefill) == (1.0, 1.0):
        return ""
    if decode == prefill:
        return f" at the engines' measured pace, {approx(decode)}x its price"
    return (
        f" at the engines' measured pace, {approx(decode)}x its price for the decodes and "
        f"{approx(prefill)}x for the prefill beside them"
    )


def _forecast_words(policy: AutoscalePolicy, outlook: Forecast) -> str:
    demand = outlook.demand
    slope = outlook.memory_trend_prompt_tokens_per_s2
    trend = (
        f" on the load of now, which {'rose' if slope > 0 else 'fell'} "
        f"{approx(abs(slope) * outlook.span_s)} prompt tokens/s over it"
        if slope
        else ""
    )
    growth = (
        f", +{approx(outlook.growth_prompt_tokens_per_s)} prompt tokens/s of growth"
        if outlook.growth_prompt_tokens_per_s > 0
        else ""
    )
    return (
        f"forecast {approx(demand.prompt_tokens_per_s)} prompt and "
        f"{approx(demand.output_tokens_per_s)} output tokens/s "
        f"(busiest {policy.attainment:.0%} of the last {outlook.span_s:.0f} s{trend}{growth})"
    )


def _compact(jumps: Sequence[Jump]) -> list[Jump]:
    """The jumps over the forecast as they are; those at or under it one per bucket (the
    latest time, the largest ratio, the requests summed)."""
    kept = [j for j in jumps if j.ratio > 1.0]
    buckets: dict[int, Jump] = {}
    for j in jumps:
        if j.ratio > 1.0:
            continue
        key = math.floor(j.at_s / UNDER_FORECAST_BUCKET_S)
        seen = buckets.get(key)
        buckets[key] = (
            j
            if seen is None
            else Jump(max(seen.at_s, j.at_s), max(seen.ratio, j.ratio), seen.requests + j.requests)
        )
    return sorted([*kept, *buckets.values()], key=lambda j: j.at_s)
