"""Which token budget the engines run: the one the tuner planned at creation, or the one the
workload they served calls for, and when they move from one to the other.

The running budget is planned for `status.tuning.plannedFor`: the observed workload it was
re-tuned on, or else the spec's hints (spec.workload) or the API's defaults, which follow the
spec as it is. Once the observed workload rests on enough requests
(core.autoscale.workload.MIN_REQUESTS) the tuner's answer for it is the candidate. The engines
move to it only when it matters and is safe:

- **Material**: the candidate serves at least `MATERIAL_GAIN` times the load per replica
  within the SLOs (the capacity model, on the observed mix), or the running budget makes one
  decode beside a whole chunk take longer than the P99 ITL target and the candidate does not.
- **Auto** rolls the engines to it (the Deployment surges a replica at a time and keeps every
  old one until its successor is Ready) unless a re-tune came less than `retuneCooldown` ago,
  the autoscaler is scaling up or sees a breach, or a rollout is under way: then it waits and
  says why. **Advise** publishes it with its predicted gain; **Off** keeps the budget.

A spec or profile change re-plans at once: the running budget is re-derived from what it was
planned for on the spec and profile as they are now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tokenpilot.api.llmservice import (
    AutoscalingStatus,
    BatchingSource,
    BatchingSpec,
    ConditionStatus,
    LLMService,
    TuningStatus,
)
from tokenpilot.api.workload import (
    EngineCostsStatus,
    PlannedFor,
    RetuneMode,
    RetuneRecommendation,
    TermCost,
    TuningBasis,
    WorkloadSpec,
    WorkloadStatus,
)
from tokenpilot.core import conditions as cond
from tokenpilot.core.autoscale.capacity import Demand, ReplicaModel
from tokenpilot.core.autoscale.costs import TermEstimate
from tokenpilot.core.autoscale.figures import approx
from tokenpilot.core.autoscale.workload import MIN_REQUESTS
from tokenpilot.core.batching import BatchingDecision
from tokenpilot.core.durations import parse_duration_s, seconds_between

# A re-tune is worth its rolling restart from this much more load per replica within the SLOs.
MATERIAL_GAIN = 1.10
# A running budget that serves almost nothing within the SLOs makes any gain look endless.
MAX_GAIN_SHOWN = 1000.0
# The autoscaler's reason codes that mean a signal is over its target: no re-tune then.
BREACH_CODES = frozenset(
    {"QueueOverTarget", "ItlOverSlo", "TtftOverSlo", "ConfirmingBreach", "CapacityStarting"}
)


@dataclass(frozen=True, slots=True)
class Tuning:
    """The budget to render and what status.tuning says of it; `retuned` is the Retuned
    Event's words when this reconcile moved the engines to a new budget."""

    decision: BatchingDecision
    basis: TuningBasis
    planned_for: PlannedFor | None
    retuned_at: str | None = None
    recommendation: RetuneRecommendation | None = None
    retuned: str | None = None

    @staticmethod
    def of(decision: BatchingDecision) -> Tuning:
        """A decision planned for no observed workload: the spec's integers, or the defaults."""
        basis = TuningBasis.spec if decision.source is BatchingSource.spec else TuningBasis.defaults
        return Tuning(decision, basis, None)


@dataclass(frozen=True, slots=True)
class Gate:
    """What the cluster says of the moment: why a re-tune must wait, if it must."""

    cooldown_s: float
    since_last_retune_s: float | None
    autoscaling: AutoscalingStatus | None
    rolling_out: bool

    def wait(self) -> str | None:
        if self.since_last_retune_s is not None and self.since_last_retune_s < self.cooldown_s:
            return (
                f"the last re-tune was {self.since_last_retune_s:.0f} s ago, under the "
                f"{self.cooldown_s:g} s retuneCooldown"
            )
        scaling = self.autoscaling
        if scaling is not None and scaling.mode in ("scale-up", "panic"):
            return "the autoscaler is scaling up"
        if scaling is not None and scaling.reason_code in BREACH_CODES:
            return f"the autoscaler sees a breach ({scaling.reason_code})"
        if self.rolling_out:
            return "a rollout is under way"
        return None


def gate_of(service: LLMService, autoscaling: AutoscalingStatus | None, now: str | None) -> Gate:
    """What the cluster says of the moment for a re-tune of `service`'s engines: its
    retuneCooldown and last re-tune (status.tuning), the scaling of the pool that would roll
    (`autoscaling`), and whether a rollout is under way. Without `now` the gate is shut: a
    plan made outside a reconcile keeps the budget the engines run."""
    running = service.status.tuning
    last_s = None
    if running is not None and running.retuned_at is not None and now is not None:
        last_s = seconds_between(running.retuned_at, now)
    return Gate(
        cooldown_s=parse_duration_s(
            service.spec.batching.retune_cooldown, "spec.batching.retuneCooldown"
        ),
        since_last_retune_s=last_s,
        autoscaling=autoscaling,
        rolling_out=now is None or rolling_out(service),
    )


def rolling_out(service: LLMService) -> bool:
    """Whether a rollout or a start of replicas is under way (the Progressing condition)."""
    found = next((c for c in service.status.conditions if c.type == cond.PROGRESSING), None)
    return found is not None and found.status is ConditionStatus.true


def observed_plan(
    workload: WorkloadStatus | None, costs: EngineCostsStatus | None
) -> PlannedFor | None:
    """What the engines showed, as what to plan for, once the workload rests on
    `MIN_REQUESTS`: the P99 prompt at its bucket's upper edge (the tuner plans for the longest
    prompt it may be), the mean context, and each step term at its measured pace where it is
    certain and slower than the profile (core.autoscale.costs)."""
    if workload is None or workload.requests < MIN_REQUESTS or workload.prompt_tokens is None:
        return None
    context = workload.mean_context_tokens
    decode = _slowdown(None if costs is None else costs.decode_step)
    prefill = decode if costs is None or costs.prefill is None else _slowdown(costs.prefill)
    return PlannedFor(
        prompt_tokens_p99=round(workload.prompt_tokens.p99),
        mean_context_tokens=None if context is None else max(1, round(context)),
        decode_step_factor=decode,
        prefill_factor=prefill,
    )


def hinted_plan(hints: WorkloadSpec | None) -> PlannedFor | None:
    """The spec's hints as what to plan for, at the profile's price."""
    if hints is None or not (hints.prompt_tokens_p99 or hints.mean_context_tokens):
        return None
    return PlannedFor(
        prompt_tokens_p99=hints.prompt_tokens_p99, mean_context_tokens=hints.mean_context_tokens
    )


def _slowdown(term: TermCost | None) -> float:
    if term is None:
        return 1.0
    return TermEstimate(term.factor, term.uncertainty, term.readings).slowdown


def settle(
    batching: BatchingSpec,
    running: TuningStatus | None,
    hints: PlannedFor | None,
    observed: PlannedFor | None,
    *,
    tune: Callable[[PlannedFor | None], BatchingDecision],
    gain: Callable[[BatchingDecision, BatchingDecision], tuple[float, str | None]],
    gate: Gate,
    now: str,
) -> Tuning:
    """The budget to run (see the module docstring). `tune(hints)` is the tuner for a workload
    (None: the defaults); `gain(running, candidate)` the candidate's capacity per replica over
    the running one's on the observed mix, and why the running one must go regardless (None
    if nothing forces it)."""
    planned = _planned_for(running, hints)
    basis = _basis_of(running, hints)
    current = tune(planned)
    kept = Tuning(current, basis, planned, running.retuned_at if running else None)
    if observed is None or observed == planned:
        return kept
    candidate = tune(observed)
    if (candidate.token_budget, candidate.max_num_seqs) == (
        current.token_budget,
        current.max_num_seqs,
    ):
        # The workload the engines served calls for the budget they run.
        return replace(kept, basis=TuningBasis.observed, planned_for=observed)
    ratio, forced = gain(current, candidate)
    if ratio < MATERIAL_GAIN and forced is None:
        return kept
    why = forced or f"{approx(ratio)}x the load per replica within the SLOs"
    mode = batching.retune
    if mode is RetuneMode.Off:
        return kept
    waiting = gate.wait() if mode is RetuneMode.Auto else None
    if mode is RetuneMode.Advise or waiting is not None:
        state = "Advised" if mode is RetuneMode.Advise else f"Waiting: {waiting}"
        return replace(
            kept,
            recommendation=RetuneRecommendation(
                max_num_batched_tokens=candidate.token_budget,
                max_num_seqs=candidate.max_num_seqs,
                predicted_gain=min(MAX_GAIN_SHOWN, float(f"{ratio:.3g}")),
                state=state,
                reason=f"the workload the engines served calls for it: {why}",
            ),
        )
    return Tuning(
        candidate,
        TuningBasis.observed,
        observed,
        retuned_at=now,
        retuned=(
            f"maxNumBatchedTokens {current.token_budget} -> {candidate.token_budget}, maxNumSeqs "
            f"{current.max_num_seqs} -> {candidate.max_num_seqs}: the workload the engines "
            f"served calls for it ({why})"
        ),
    )


def _planned_for(running: TuningStatus | None, hints: PlannedFor | None) -> PlannedFor | None:
    """What the running budget was planned for: the observed workload it was re-tuned on, or
    the spec's hints as they are now."""
    if running is not None and running.basis is TuningBasis.observed:
        return running.planned_for
    return hints


def _basis_of(running: TuningStatus | None, hints: PlannedFor | None) -> TuningBasis:
    if running is not None and running.basis is TuningBasis.observed:
        return TuningBasis.observed
    return TuningBasis.defaults if hints is None else TuningBasis.hints


def capacity_gain(
    running: ReplicaModel, candidate: ReplicaModel, mix: Demand
) -> tuple[float, str | None]:
    """The load per replica `candidate` serves within the SLOs over `running`'s, for a
    workload of `mix`'s shape; and why `running` must go regardless: a step of one decode
    beside a whole chunk over the P99 ITL target, which no fleet size fixes."""
    forced = None
    itl_s = running.itl_slo_s
    if itl_s is not None and running.chunk_alone_step_s() > itl_s >= candidate.chunk_alone_step_s():
        forced = (
            f"a step of one decode beside a whole chunk of {running.token_budget} tokens takes "
            f"{running.chunk_alone_step_s() * 1e3:.0f} ms, over the {itl_s * 1e3:.0f} ms P99 "
            "ITL target"
        )
    before, after = servable_scale(running, mix), servable_scale(candidate, mix)
    if before <= 0:
        return (float("inf") if after > 0 else 1.0), forced
    return after / before, forced


def servable_scale(model: ReplicaModel, mix: Demand, *, steps: int = 40) -> float:
    """The largest multiple of `mix` one replica serves within the SLOs (bisection)."""
    low, high = 0.0, 1.0
    while model.serves(mix.scaled(high)).ok and high < 1e9:
        low, high = high, high * 2
    for _ in range(steps):
        mid = (low + high) / 2
        if model.serves(mix.scaled(mid)).ok:
            low = mid
        else:
            high = mid
    return low


def workload_mix(workload: WorkloadStatus) -> Demand | None:
    """One request a second of the observed workload, as the capacity model takes a demand:
    prompt tokens to prefill (prefix-cache hits excluded), output tokens, the mean lengths and
    the P99 prompt as the tail."""
    prompt, output = workload.prompt_tokens, workload.output_tokens
    if prompt is None or output is None:
        return None
    computed = prompt.mean * (1.0 - (workload.prefix_cache_hit_rate or 0.0))
    return Demand(computed, output.mean, prompt.mean, output.mean, prompt.p99)
