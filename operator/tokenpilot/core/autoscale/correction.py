"""What the engines show of the step model's price, and how it corrects the model.

The capacity model prices a replica from the GPU profile. Engines can run slower than the
profile says (a profile measured on other drivers, a neighbour on the node, clocks held down
by heat); the SLO signals then override the model at each breach, but the model, trusted
again a window later, sizes the fleet for the profile's pace.

vLLM's inter-token latency histogram counts every gap between two tokens of a request and sums
their seconds: over an interval, sum over count is the mean step the decodes met, exact (no
bucket edges). The step model prices the steps that mean stands for, for that interval's load
per replica (`ReplicaModel.price_of_steps_s`: steps with a whole chunk and steps of decodes
alone, as vLLM's scheduler runs them, in the shares steps of the measured length carry), and
the ratio of the two (`step_ratio`) is how much slower the engines run than priced: the
slowdown itself, not amplified by the larger batch slower steps gather. The ratios of the
forecast's memory are kept, and their median (at least `MIN_STEP_SAMPLES` of them) scales
every step the model prices (`engine_slowness`).

Only slower counts: engines faster than their profile keep the profile's margin, since one
factor read at light load (the weight read) need not hold at the heavy load a fleet is sized
for. And only by more than `PACE_TOLERANCE`: on engines that run exactly at the model's price
the median reads 0.95 to 1.00 (the fleet simulator, development data), the model's own error
on a load that moves within an interval and on the mean context it prices, so a smaller excess
is not told from it; the Kubernetes HPA ignores ratios within the same 10 % of its target, the
noise of its own measurement.

What the engines showed is also the `PaceAsProfiled` condition (`engine_pace`): Unknown until
measured, True within the tolerance, False when the model is corrected (the engines are not
what the GPU profile describes: recalibrate), with its own reason where the corrected pace
makes the token budget break the P99 ITL at any fleet size, which no number of replicas
fixes: only a smaller budget or a faster GPU.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tokenpilot.api.llmservice import ConditionStatus
from tokenpilot.core.autoscale.capacity import Demand, ReplicaModel
from tokenpilot.core.autoscale.figures import approx
from tokenpilot.core.autoscale.observation import Load
from tokenpilot.core.calibration.cluster import RECALIBRATE_ANNOTATION

# A mean over fewer gaps is mostly one or two steps': too few to price a step by.
MIN_ITL_GAPS = 50
# Ratios needed before the step's price is corrected: half a minute at the default interval.
MIN_STEP_SAMPLES = 6
# An excess of the measured step over the price within this share is the model's own error.
PACE_TOLERANCE = 0.1
# The fix where the engines are not what their profile describes.
RECALIBRATE = (
    "recalibrate this GPU (spec.batching.calibration Auto and a new value of the "
    f"{RECALIBRATE_ANNOTATION} annotation) or correct its profile"
)


@dataclass(frozen=True, slots=True)
class EnginePace:
    """What the engines' steps showed of the step model's price, as the `PaceAsProfiled`
    condition: its status, reason and message."""

    status: ConditionStatus
    reason: str
    message: str


def step_ratio(model: ReplicaModel, load: Load, mix: Demand) -> float | None:
    """The mean step the decodes met over `load`'s interval over the step model's price of
    that interval's load per replica (prompt and output lengths from `mix`); None where the
    interval says nothing of a step's price: too few gaps, or a load the model says one
    replica cannot keep up with (its price would run away)."""
    if load.num_pods <= 0 or load.num_itl_gaps < MIN_ITL_GAPS or load.interval_s <= 0:
        return None
    per_replica_s = load.interval_s * load.num_pods
    share = Demand(
        max(0.0, load.num_prompt_tokens - load.num_cached_prompt_tokens) / per_replica_s,
        load.num_output_tokens / per_replica_s,
        mix.mean_prompt_tokens,
        mix.mean_output_tokens,
        mix.tail_prompt_tokens,
    )
    measured_s = load.itl_sum_s / load.num_itl_gaps
    priced_s = model.price_of_steps_s(share, measured_s)
    if priced_s is None or not priced_s > 0:
        return None
    ratio = measured_s / priced_s
    return ratio if math.isfinite(ratio) and ratio > 0 else None


def measured_pace(ratios: Sequence[tuple[float, float]]) -> float | None:
    """The engines' step over the model's price: the median of the remembered (time, ratio)
    pairs, or None until there are `MIN_STEP_SAMPLES`."""
    if len(ratios) < MIN_STEP_SAMPLES:
        return None
    return statistics.median(r for _, r in ratios)


def engine_slowness(ratios: Sequence[tuple[float, float]]) -> float:
    """How much slower than priced the engines run: the `measured_pace` where it exceeds 1 by
    more than `PACE_TOLERANCE`, else 1 (and 1 until measured)."""
    pace = measured_pace(ratios)
    return pace if pace is not None and pace > 1.0 + PACE_TOLERANCE else 1.0


def engine_pace(
    model: ReplicaModel, ratios: Sequence[tuple[float, float]], memory_s: float
) -> EnginePace:
    """The `PaceAsProfiled` condition for engines whose remembered (time, ratio) pairs are
    `ratios` over the last `memory_s`, priced by `model` at the profile's pace. No figure that
    moves every interval is in a message, so a steady pace writes no status."""
    slowness = engine_slowness(ratios)
    if len(ratios) < MIN_STEP_SAMPLES:
        return EnginePace(
            ConditionStatus.unknown,
            "PaceNotMeasured",
            f"fewer than {MIN_STEP_SAMPLES} intervals of the last {memory_s:.0f} s had the "
            f"{MIN_ITL_GAPS} token gaps it takes to measure the engines' step; the step model "
            "prices steps as the GPU profile does",
        )
    if slowness == 1.0:
        return EnginePace(
            ConditionStatus.true,
            "AsProfiled",
            f"the engines' steps take the step model's price to within its "
            f"{PACE_TOLERANCE:.0%} error, or less (the median of the last {memory_s:.0f} s)",
        )
    measured = (
        f"the engines' steps take {approx(slowness)}x the step model's price (the median of "
        f"the last {memory_s:.0f} s); the fleet is sized at that pace"
    )
    itl_s = model.itl_slo_s
    at_pace_s = model.slowed(slowness).chunk_alone_step_s()
    if itl_s is not None and at_pace_s > itl_s >= model.chunk_alone_step_s():
        return EnginePace(
            ConditionStatus.false,
            "BudgetBreaksItl",
            f"{measured}, at which a step of one decode beside a whole chunk of the "
            f"{model.token_budget}-token budget takes {at_pace_s * 1e3:.0f} ms, over the "
            f"{itl_s * 1e3:.0f} ms P99 ITL target at any fleet size: set "
            f"spec.batching.maxNumBatchedTokens to a budget planned at this pace "
            f"(tokenpilot plan ... --engine-slowdown {approx(slowness)}), or {RECALIBRATE}",
        )
    return EnginePace(
        ConditionStatus.false,
        "SlowerThanProfile",
        f"{measured}: the GPU profile does not describe these engines (drivers, clocks held "
        f"down, a neighbour on the node); {RECALIBRATE}",
    )
