"""What the engines show of the step model's errors, and how they correct it.

The capacity model prices a replica from the GPU profile. Engines can run slower than the
profile says (a profile measured on other drivers, a neighbour on the node, clocks held down
by heat), and the model can misprice a prompt mix its queueing rule does not describe. Two
measurements correct it, each for one kind of error:

**The step's price** (`step_ratio`). vLLM's inter-token latency histogram counts every gap
between two tokens of a request and sums their seconds: over an interval, sum over count is
the mean step the decodes met, exact (no bucket edges). The step model prices the mean step
of that interval's load per replica (`ReplicaModel.mean_decode_step_s`: steps with a whole
chunk and steps of decodes alone, as vLLM's scheduler runs them), and the ratio of the two is
how much slower the engines run than priced. The ratios of the forecast's
memory are kept, and their median (at least `MIN_STEP_SAMPLES` of them) scales every step
the model prices (`engine_slowness`). Only slower counts: engines faster than their profile
keep the profile's margin, since one factor fitted at light load (the weight read) need not
hold at the heavy load a fleet is sized for. And only by more than `PACE_TOLERANCE`: on
engines that run exactly at the model's price the median reads 0.96 to 1.00 (the fleet
simulator, development data), the model's own error on a load that moves within an interval
and prices the mean context, so a smaller excess is not told from it; the Kubernetes HPA
ignores ratios within the same 10 % of its target, the noise of its own measurement.

**The SLOs' verdict** (`miss_factor`). A breach on a fleet the model, corrected as above,
said was enough is a **miss**: the model was off by `ready × pressure / modelled`, the fleet
the breach asks for over the model's count. The breach scales up on its own
(`ceil(ready × pressure)`); without a memory of why, the model took the fleet back down one
window later and the breach returned, a saw-tooth that spent a cold start and the breach's
requests every few minutes. The model's count is multiplied by the largest miss of the last
hour (the records' memory, `demand.MAX_MEMORY_S`); after an hour without one it lapses.
A breach counts as a miss only where it says something about the model: the fleet had every
replica Ready at its present size for a whole metrics window (the P99s and the queue were
read on that fleet alone, not on one still waiting for its cold starts), and it held at least
what the model asked for. A breach on a smaller fleet is the forecast's (a burst over it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from tokenpilot.core.autoscale.capacity import Demand, ReplicaModel
from tokenpilot.core.autoscale.demand import MAX_MEMORY_S
from tokenpilot.core.autoscale.observation import Load

# How long a miss corrects the model: the records' memory, so one mispriced hour costs one breach.
MISS_MEMORY_S = MAX_MEMORY_S


def correction(misses: Sequence[tuple[float, float]], now_s: float) -> float:
    """The factor the model's count is multiplied by: the largest miss of the last hour, at
    least 1 (a model that prices too high is left to its own count)."""
    return max([1.0, *(f for at_s, f in misses if at_s > now_s - MISS_MEMORY_S)])


def miss_factor(ready_replicas: int, pressure: float, modelled_replicas: int) -> float:
    """How far the model was off where `ready_replicas` it sized for `modelled_replicas` (its
    count before any correction) breached at `pressure` (signal over target)."""
    return ready_replicas * pressure / max(1, modelled_replicas)


def remember_miss(
    misses: Sequence[tuple[float, float]], factor: float, now_s: float
) -> tuple[tuple[float, float], ...]:
    """`misses` with this one added and those older than an hour dropped."""
    kept = [(at_s, f) for at_s, f in misses if at_s > now_s - MISS_MEMORY_S]
    return (*kept, (now_s, factor))


def steady_fleet(
    previous: tuple[int, float] | None, ready_replicas: int, starting_replicas: int, now_s: float
) -> tuple[int, float] | None:
    """(ready replicas, since when) while none is starting; None while any is."""
    if starting_replicas > 0:
        return None
    if previous is not None and previous[0] == ready_replicas:
        return previous
    return (ready_replicas, now_s)


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
