"""What the engines show of the step model's price, and how it corrects the model.

The capacity model prices a replica from the GPU profile. Engines can run slower than the
profile says (a profile measured on other drivers, a neighbour on the node, clocks held down
by heat); the SLO signals then override the model at each breach, but the model, trusted
again a window later, sizes the fleet for the profile's pace.

vLLM's inter-token latency histogram counts every gap between two tokens of a request and sums
their seconds: over an interval, sum over count is the mean step the decodes met, exact (no
bucket edges). The step model prices the mean step of that interval's load per replica
(`ReplicaModel.mean_decode_step_s`: steps with a whole chunk and steps of decodes alone, as
vLLM's scheduler runs them), and the ratio of the two (`step_ratio`) is how much slower the
engines run than priced. The ratios of the forecast's memory are kept, and their median (at
least `MIN_STEP_SAMPLES` of them) scales every step the model prices (`engine_slowness`).

Only slower counts: engines faster than their profile keep the profile's margin, since one
factor read at light load (the weight read) need not hold at the heavy load a fleet is sized
for. And only by more than `PACE_TOLERANCE`: on engines that run exactly at the model's price
the median reads 0.96 to 1.00 (the fleet simulator, development data), the model's own error
on a load that moves within an interval and on the mean context it prices, so a smaller excess
is not told from it; the Kubernetes HPA ignores ratios within the same 10 % of its target, the
noise of its own measurement.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from tokenpilot.core.autoscale.capacity import Demand, ReplicaModel
from tokenpilot.core.autoscale.observation import Load

# A mean over fewer gaps is mostly one or two steps': too few to price a step by.
MIN_ITL_GAPS = 50
# Ratios needed before the step's price is corrected: half a minute at the default interval.
MIN_STEP_SAMPLES = 6
# An excess of the measured step over the price within this share is the model's own error.
PACE_TOLERANCE = 0.1


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
    priced_s = model.mean_decode_step_s(share)
    if priced_s is None or not priced_s > 0:
        return None
    ratio = load.itl_sum_s / load.num_itl_gaps / priced_s
    return ratio if math.isfinite(ratio) and ratio > 0 else None


def engine_slowness(ratios: Sequence[tuple[float, float]]) -> float:
    """How much slower than priced the engines run: the median of the remembered (time,
    ratio) pairs where it exceeds 1 by more than `PACE_TOLERANCE`, else 1; and 1 until there
    are `MIN_STEP_SAMPLES`."""
    if len(ratios) < MIN_STEP_SAMPLES:
        return 1.0
    median = statistics.median(r for _, r in ratios)
    return median if median > 1.0 + PACE_TOLERANCE else 1.0
