"""What the engines show of the step model's price, and how it corrects the model.

The capacity model prices a replica from the GPU profile. Engines can run slower than the
profile says (a profile measured on other drivers, a neighbour on the node, clocks held down
by heat); the SLO signals then override the model at each breach, but the model, trusted
again a window later, sizes the fleet for the profile's pace.

vLLM's inter-token latency histogram counts every gap between two tokens of a request and sums
their seconds: over an interval, sum over count is the mean step the decodes met, exact (no
bucket edges). The step model prices the two kinds of step that mean is made of, for that
interval's load per replica (`ReplicaModel.steps_priced`): the decodes alone, and the decodes
beside a whole chunk, which a share `f` of the steps carry. Each interval is kept as a
`PaceReading`: the measured mean step over the price of the decodes alone, and the chunk
term `y = f (chunk / alone - 1)`, what the chunk steps add to that price if the decodes meet
them as often as steps carry them.

How often the decodes do meet them is not in the histogram: it is set by the balancer and the
concurrency, not by the engines. Behind a least-requests balancer with under one request per
replica, a new prompt lands on an idle replica and is prefilled with no decode beside it; in a
burst, prompts and decodes crowd the same replicas; read as if every decode met chunks in the
share `f`, engines at the profile's own pace read under 1 (docs/autoscaling.md, *What the
engines show of the model*). So each interval reads `k (1 + a y)`, with `k` the slowdown and
`a` how often the decodes met chunk steps, as a share of how often steps carried them;
intervals with less chunk work to meet carry less of the unknown, and the slowdown is the
reading where there is none:
the intercept at `y = 0` of a line through the remembered readings (`measured_pace`). Its slope
is the steepest the readings allow at 99 % (the Theil-Sen upper bound), so the pace departs
from `a = 1` only as far as the readings prove: a level load's readings share one chunk term
and prove no slope. It is kept between two bounds: the readings as if the decodes met every
chunk step in its share (`a = 1`; only bursts that crowd them together exceed it, and they read
the engines slower, the safe side) and as if they met none (`a = 0`). The pace is measured over
the forecast's memory, at least `MIN_STEP_SAMPLES` readings, and scales every step the model
prices (`engine_slowness`).

Only slower counts: engines faster than their profile keep the profile's margin, since one
factor read at light load (the weight read) need not hold at the heavy load a fleet is sized
for. And only by more than `PACE_TOLERANCE`: on engines that run exactly at the model's price
the pace reads a few percent under 1 (the model's own error on a load that moves within an
interval and on the mean context it prices), so a smaller excess is not told from it; the
Kubernetes HPA ignores ratios within the same 10 % of its target, the noise of its own
measurement.

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
from statistics import NormalDist
from typing import NamedTuple

from tokenpilot.api.llmservice import ConditionStatus
from tokenpilot.core.autoscale.capacity import Demand, ReplicaModel
from tokenpilot.core.autoscale.demand import theil_sen_bounds
from tokenpilot.core.autoscale.observation import Load
from tokenpilot.core.calibration.cluster import RECALIBRATE_ANNOTATION

# A mean over fewer gaps is mostly one or two steps': too few to price a step by.
MIN_ITL_GAPS = 50
# Ratios needed before the step's price is corrected: half a minute at the default interval.
MIN_STEP_SAMPLES = 6
# The line through the readings departs from the decodes meeting the chunks as often as steps
# carry them only as far as its slope is bounded at this normal quantile (one-sided 99 %).
SLOPE_BOUND_Z = NormalDist().inv_cdf(0.99)
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


class PaceReading(NamedTuple):
    """One interval's mean step against the model's price of its two kinds of step."""

    at_s: float
    # The decodes' measured mean step over the price of a step of the decodes alone.
    over_alone: float
    # What the chunk steps add to that price, as a share of it, if the decodes meet them as
    # often as steps carry them: f (chunk / alone - 1).
    chunk_term: float

    @property
    def over_price(self) -> float:
        """The measured mean step over the price of both kinds in the share steps carry them."""
        return self.over_alone / (1.0 + self.chunk_term)


def pace_reading(model: ReplicaModel, load: Load, mix: Demand, at_s: float) -> PaceReading | None:
    """The interval `load` (prompt and output lengths from `mix`) as a `PaceReading` at `at_s`;
    None where it says nothing of a step's price: too few gaps, or a load the model says one
    replica cannot keep up with (its price would run away)."""
    if load.num_pods <= 0 or load.num_itl_gaps < MIN_ITL_GAPS or load.interval_s <= 0:
        return None
    per_replica_s = load.interval_s * load.num_pods
    share = Demand(
        load.computed_prompt_tokens / per_replica_s,
        load.num_output_tokens / per_replica_s,
        mix.mean_prompt_tokens,
        mix.mean_output_tokens,
        mix.tail_prompt_tokens,
    )
    measured_s = load.itl_sum_s / load.num_itl_gaps
    kinds = model.steps_priced(share, measured_s)
    if kinds is None or not kinds.alone_s > 0:
        return None
    over_alone = measured_s / kinds.alone_s
    chunk_term = kinds.chunk_share * (kinds.chunk_s / kinds.alone_s - 1.0)
    if not (math.isfinite(over_alone) and over_alone > 0 and math.isfinite(chunk_term)):
        return None
    return PaceReading(at_s, over_alone, max(0.0, chunk_term))


def measured_pace(readings: Sequence[PaceReading]) -> float | None:
    """The engines' step over the model's price (see the module docstring): the intercept of
    the line of `over_alone` over `chunk_term` at the steepest slope the readings allow (the
    Theil-Sen upper bound at `SLOPE_BOUND_Z`), kept between the medians of `over_price` and of
    `over_alone`; None until there are `MIN_STEP_SAMPLES` readings."""
    if len(readings) < MIN_STEP_SAMPLES:
        return None
    met_as_carried = statistics.median(r.over_price for r in readings)
    met_none = statistics.median(r.over_alone for r in readings)
    bounds = theil_sen_bounds([(r.chunk_term, r.over_alone) for r in readings], z=SLOPE_BOUND_Z)
    if bounds is None:
        return met_as_carried
    steepest = bounds[1]
    at_no_chunk = statistics.median(r.over_alone - steepest * r.chunk_term for r in readings)
    return min(met_none, max(met_as_carried, at_no_chunk))


def engine_slowness(pace: float | None) -> float:
    """How much slower than priced the engines run: the `measured_pace` where it exceeds 1 by
    more than `PACE_TOLERANCE`, else 1 (and 1 until measured)."""
    return pace if pace is not None and pace > 1.0 + PACE_TOLERANCE else 1.0
