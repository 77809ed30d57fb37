"""What the engines' steps cost, term by term, against the step model's price of each.

Two terms, each measured on its own signal:

- **A step of the decodes alone** (`decode`): the engines' measured pace
  (core.autoscale.correction.measured_pace), the inter-token gaps' mean over the price of the
  steps they met, read where no decode meets a chunk.
- **The prefill tokens beside the decodes** (`prefill`): vLLM's prefill-time histogram (the
  time from a request's first scheduling to its first token, `request_prefill_time_seconds`)
  against the model's price of the steps that prefill takes. Each interval's mean prefill is
  priced as the prompt's chunks of `budget - n` tokens, each beside the `n` decodes a step
  carries (the measured step times the decode rate), with the steps' decode part at the
  decode term's pace; what is left over the chunks' price is the prefill term:

      measured = steps x decode x alone + prefill x (what the chunks add to those steps)

Each term is the median of its readings over the forecast's lookback, with a one-sided 99 %
bound on its error (the readings' spread about the median over the square root of their
number), and prices steps only where it is certain (the bound within `PACE_TOLERANCE` of it)
and slower than the profile by more than that: engines faster than their profile keep its
margin, as the single pace does. Where the prefill term is not known the decode term's pace
stands for the whole step, as the single pace did.
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
from tokenpilot.core.autoscale.correction import (
    MIN_ITL_GAPS,
    MIN_STEP_SAMPLES,
    PACE_TOLERANCE,
    RECALIBRATE,
    EnginePace,
    engine_slowness,
)
from tokenpilot.core.autoscale.figures import approx
from tokenpilot.core.autoscale.observation import Load, Served
from tokenpilot.core.roofline import PrefillChunk

# Prefills finished in an interval before their mean prices anything: fewer are one or two
# requests' luck in the queue.
MIN_PREFILLS = 4
_BOUND_Z = NormalDist().inv_cdf(0.99)
# The median absolute deviation of normal readings times this is their standard deviation.
_MAD_TO_SIGMA = 1.4826


class PrefillReading(NamedTuple):
    """One interval's mean prefill: what it took over the price of its steps' decode part
    (`excess_s`), beside what the model says its chunks add to those steps (`added_s`)."""

    at_s: float
    excess_s: float
    added_s: float

    @property
    def factor(self) -> float:
        return self.excess_s / self.added_s


@dataclass(frozen=True, slots=True)
class TermEstimate:
    """One term's measured pace over the profile's price, its 99 % error bound and readings."""

    factor: float
    uncertainty: float
    readings: int

    @property
    def certain(self) -> bool:
        return (
            self.readings >= MIN_STEP_SAMPLES and self.uncertainty <= PACE_TOLERANCE * self.factor
        )

    @property
    def slowdown(self) -> float:
        """The factor steps are priced at: this one where certain and slower than the profile
        by more than the model's own error, else 1."""
        return self.factor if self.certain and self.factor > 1.0 + PACE_TOLERANCE else 1.0


@dataclass(frozen=True, slots=True)
class EngineCosts:
    """Both terms as measured (None: not yet)."""

    decode: TermEstimate | None = None
    prefill: TermEstimate | None = None

    def factors(self) -> tuple[float, float]:
        """(decode, prefill) as the model prices steps at them. The decode term is the single
        pace (core.autoscale.correction.engine_slowness: its line through the readings is
        already bounded by what they prove); the prefill term counts where it is certain."""
        decode = engine_slowness(None if self.decode is None else self.decode.factor)
        if self.prefill is None or not self.prefill.certain:
            return decode, decode
        return decode, self.prefill.slowdown


def prefill_estimate(readings: Sequence[PrefillReading]) -> TermEstimate | None:
    """The prefill term over `readings`: their excess over their chunks' price, summed (a
    ratio of sums: an interval of a few long prompts weighs as much as they took, where a
    median of each interval's ratio leans with the prompts' skew), and its one-sided 99 %
    error bound (the ratio estimator's standard error); None with no readings."""
    if not readings:
        return None
    total_added = sum(r.added_s for r in readings)
    factor = sum(r.excess_s for r in readings) / total_added
    n = len(readings)
    if n < 2:
        return TermEstimate(factor, math.inf, n)
    residuals = sum((r.excess_s - factor * r.added_s) ** 2 for r in readings)
    error = math.sqrt(residuals / (n * (n - 1))) / (total_added / n)
    return TermEstimate(max(0.0, factor), _BOUND_Z * error, n)


def estimate(values: Sequence[float]) -> TermEstimate | None:
    """The median of `values` and its one-sided 99 % error bound; None with no values."""
    if not values:
        return None
    middle = statistics.median(values)
    spread = _MAD_TO_SIGMA * statistics.median(abs(v - middle) for v in values)
    return TermEstimate(middle, _BOUND_Z * spread / math.sqrt(len(values)), len(values))


def prefill_reading(
    model: ReplicaModel, load: Load, mix: Demand, decode_factor: float, at_s: float
) -> PrefillReading | None:
    """The interval's prefill term (see the module docstring), or None where it prices
    nothing: too few prefills, no decode step measured, or no room in the budget beside the
    decodes."""
    served = load.served
    if (
        served.prefill_count < MIN_PREFILLS
        or load.num_itl_gaps <= 0
        or load.num_pods <= 0
        or load.interval_s <= 0
    ):
        return None
    measured_s = served.prefill_sum_s / served.prefill_count
    step_s = load.itl_sum_s / load.num_itl_gaps
    decodes = math.ceil(load.num_output_tokens / (load.interval_s * load.num_pods) * step_s)
    room = model.token_budget - decodes
    mean_tokens = _mean_computed_tokens(load)
    if room <= 0 or mean_tokens < 1 or not measured_s > 0:
        return None
    context = math.ceil(decodes * max(1.0, mix.mean_prompt_tokens + mix.mean_output_tokens / 2))
    alone_s = model.pricer.iteration_s(decodes, context)
    # How often a prefill starts beside another's last chunk (Little's law on the measured
    # time: the share of time a prefill is under way): it is scheduled in what that chunk
    # leaves of the room, on average half of it, so its span carries those tokens too.
    beside = min(1.0, served.prefill_count / (load.interval_s * load.num_pods) * measured_s)
    steps = added_s = 0.0
    for tokens, weight in _prompt_points(served, mean_tokens):
        span = tokens + beside * room / 2
        whole, rest = divmod(round(span), room)
        if whole:
            # The whole chunks priced once, at the prompt computed before the middle one: a
            # chunk's attention grows with what came before it.
            middle = PrefillChunk(room, whole * room // 2)
            added_s += (
                weight * whole * (model.pricer.iteration_s(decodes, context, (middle,)) - alone_s)
            )
        if rest:
            last = PrefillChunk(rest, whole * room)
            added_s += weight * (model.pricer.iteration_s(decodes, context, (last,)) - alone_s)
        steps += weight * (whole + (1 if rest else 0))
    if not added_s > 0:
        return None
    # Under the decode part's price it is no slower than that: nothing left for the chunks.
    excess_s = max(0.0, measured_s - steps * decode_factor * alone_s)
    return PrefillReading(at_s, excess_s, added_s) if math.isfinite(excess_s) else None


def _mean_computed_tokens(load: Load) -> float:
    """The mean prompt tokens a prefill of the interval computed: the prompt-length
    histogram's (the same finished requests as the prefill times), less the prefix cache's
    share of the prompt tokens; the counters' where the engines export no histogram."""
    served, lengths = load.served, load.served.prompt_lengths
    if lengths is None or lengths.num_requests <= 0:
        return load.computed_prompt_tokens / served.prefill_count
    computed = (
        load.computed_prompt_tokens / load.num_prompt_tokens if load.num_prompt_tokens > 0 else 1.0
    )
    return lengths.total_tokens / lengths.num_requests * computed


def _prompt_points(served: Served, mean_tokens: float) -> list[tuple[float, float]]:
    """The interval's prompts as (tokens computed, share of the prefills): each bucket of the
    prompt-length histogram at its middle, scaled so the mean is the counters' exact one (the
    prefix cache's hits excluded); the mean alone where the engines export no histogram."""
    lengths = served.prompt_lengths
    if lengths is None or lengths.num_requests <= 0:
        return [(mean_tokens, 1.0)]
    points: list[tuple[float, float]] = []
    lower, below = 0.0, 0.0
    for bound, cumulative in lengths.buckets:
        count = cumulative - below
        if count > 0:
            middle = lower * 1.05 if math.isinf(bound) else (lower + bound) / 2
            points.append((middle, count / lengths.num_requests))
        lower, below = bound, cumulative
    mean = sum(tokens * weight for tokens, weight in points)
    if not mean > 0:
        return [(mean_tokens, 1.0)]
    return [(tokens * mean_tokens / mean, weight) for tokens, weight in points]


def engine_pace(model: ReplicaModel, costs: EngineCosts, lookback_s: float) -> EnginePace:
    """The `PaceAsProfiled` condition for engines whose steps over the last `lookback_s` cost
    `costs` (the decode term None: not measured), priced by `model` at the profile's pace; it
    names each term that differs. No figure that moves every interval is in a message, so a
    steady pace writes no status."""
    decode, prefill = costs.factors()
    if costs.decode is None:
        return EnginePace(
            ConditionStatus.unknown,
            "PaceNotMeasured",
            f"fewer than {MIN_STEP_SAMPLES} intervals of the last {lookback_s:.0f} s had the "
            f"{MIN_ITL_GAPS} token gaps it takes to measure the engines' step; the step model "
            "prices steps as the GPU profile does",
        )
    if (decode, prefill) == (1.0, 1.0):
        return EnginePace(
            ConditionStatus.true,
            "AsProfiled",
            f"the engines' steps take the step model's price to within its "
            f"{PACE_TOLERANCE:.0%} error, or less (measured over the last {lookback_s:.0f} s)",
        )
    which = (
        f"the engines' steps take {approx(decode)}x the step model's price"
        if decode == prefill
        else f"the engines' decode-only steps take {approx(decode)}x the step model's price "
        f"and the prefill beside them {approx(prefill)}x"
    )
    measured = (
        f"{which} (measured over the last {lookback_s:.0f} s); the fleet is sized at that pace"
    )
    itl_s = model.itl_slo_s
    at_pace_s = model.priced_at(decode, prefill).chunk_alone_step_s()
    if itl_s is not None and at_pace_s > itl_s >= model.chunk_alone_step_s():
        return EnginePace(
            ConditionStatus.false,
            "BudgetBreaksItl",
            f"{measured}, at which a step of one decode beside a whole chunk of the "
            f"{model.token_budget}-token budget takes {at_pace_s * 1e3:.0f} ms, over the "
            f"{itl_s * 1e3:.0f} ms P99 ITL target at any fleet size: set "
            f"spec.batching.maxNumBatchedTokens to a budget planned at this pace "
            f"(tokenpilot plan ... --engine-slowdown {approx(max(decode, prefill))}), or "
            f"{RECALIBRATE}",
        )
    return EnginePace(
        ConditionStatus.false,
        "SlowerThanProfile",
        f"{measured}: the GPU profile does not describe these engines (drivers, clocks held "
        f"down, a neighbour on the node); {RECALIBRATE}",
    )
