"""What the autoscaler remembers of the engines' pace: each interval's reading of their steps
against the step model's price, over the forecast's lookback, and the terms they give.

`PaceMemory` is a frozen value with `add` (one evaluation's reading), `snapshot` and `restore`
(core.autoscale.memory writes it for a later process). The decodes' mean step is read against
the model's price (core.autoscale.correction), with the chunks beside them priced at the prefill
term measured so far, so a slow prefill is not read as slow decodes; the prefills' mean time is
read from the prompt-length histogram with the decodes' part priced at the decode pace so far
(core.autoscale.costs). The plan (core.autoscale.plan) prices its forecast at both terms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.autoscale.correction import (
    MIN_STEP_SAMPLES,
    PaceReading,
    measured_pace,
    pace_reading,
)
from tokenpilot.core.autoscale.costs import (
    EngineCosts,
    PrefillReading,
    TermEstimate,
    estimate,
    prefill_estimate,
    prefill_reading,
)
from tokenpilot.core.autoscale.demand import Forecast
from tokenpilot.core.autoscale.figures import seconds_ago, snapshot_figure
from tokenpilot.core.autoscale.observation import Load


@dataclass(frozen=True, slots=True)
class PaceMemory:
    """The engines' steps against the step model's price, in each interval of the lookback
    that priced one: the decodes' mean step (core.autoscale.correction) and the prefills' mean
    time (core.autoscale.costs); the single pace and both terms they give (None until
    measured)."""

    readings: tuple[PaceReading, ...] = ()
    pace: float | None = None
    prefill_readings: tuple[PrefillReading, ...] = ()
    costs: EngineCosts = field(default_factory=EngineCosts)

    def add(
        self,
        model: ReplicaModel | None,
        counted: Load | None,
        outlook: Forecast | None,
        *,
        at_s: float,
        lookback_s: float,
    ) -> PaceMemory:
        """This memory with the interval `counted` priced at the forecast's mix (where a model
        prices it), the readings older than the lookback forgotten when one was counted."""
        readings, prefills = self.readings, self.prefill_readings
        if counted is not None:
            readings = tuple(r for r in readings if r.at_s > at_s - lookback_s)
            prefills = tuple(r for r in prefills if r.at_s > at_s - lookback_s)
        if counted is not None and model is not None and outlook is not None:
            mix = outlook.demand
            # The chunks the decodes meet priced at the prefill term measured so far, so a
            # slow prefill is not read as slow decodes.
            prefill_pace = _prefill_pace(self.costs)
            priced = model if prefill_pace == 1.0 else model.priced_at(1.0, prefill_pace)
            reading = pace_reading(priced, counted, mix, at_s)
            if reading is not None:
                readings = (*readings, reading)
            prefill = prefill_reading(model, counted, mix, _decode_pace(readings), at_s)
            if prefill is not None:
                prefills = (*prefills, prefill)
        return PaceMemory.of(readings, prefills)

    @staticmethod
    def of(readings: Sequence[PaceReading], prefills: Sequence[PrefillReading] = ()) -> PaceMemory:
        """The memory of these readings, with the pace and the terms they give."""
        pace = measured_pace(readings)
        decode = None
        if pace is not None:
            spread = estimate([r.over_alone - (r.over_alone - pace) for r in readings])
            decode = TermEstimate(
                pace, 0.0 if spread is None else spread.uncertainty, len(readings)
            )
        costs = EngineCosts(decode, prefill_estimate(prefills))
        return PaceMemory(tuple(readings), pace, tuple(prefills), costs)

    def snapshot(self, now_s: float) -> list[list[float]]:
        return [
            [
                seconds_ago(now_s, r.at_s),
                snapshot_figure(r.over_alone),
                snapshot_figure(r.chunk_term),
            ]
            for r in self.readings
        ]

    def prefill_snapshot(self, now_s: float) -> list[list[float]]:
        return [
            [seconds_ago(now_s, r.at_s), snapshot_figure(r.excess_s), snapshot_figure(r.added_s)]
            for r in self.prefill_readings
        ]

    @staticmethod
    def restore(
        rows: Sequence[Sequence[float]],
        *,
        now_s: float,
        aged_s: float,
        lookback_s: float,
        prefill_rows: Sequence[Sequence[float]] = (),
    ) -> PaceMemory:
        """The readings of `snapshot`'s rows, each `aged_s` older than written; they live as
        long as the forecast's load, not the records' hour."""
        readings = sorted(
            PaceReading(now_s - aged_s - age_s, over_alone, chunk_term)
            for age_s, over_alone, chunk_term in rows
            if aged_s + age_s < lookback_s
        )
        prefills = sorted(
            PrefillReading(now_s - aged_s - age_s, excess_s, added_s)
            for age_s, excess_s, added_s in prefill_rows
            if aged_s + age_s < lookback_s and added_s > 0
        )
        return PaceMemory.of(readings, prefills)


def _prefill_pace(costs: EngineCosts) -> float:
    """The prefill term's pace so far, once it rests on `MIN_STEP_SAMPLES` readings and is
    slower than the profile (1 until then)."""
    prefill = costs.prefill
    if prefill is None or prefill.readings < MIN_STEP_SAMPLES:
        return 1.0
    return max(1.0, prefill.factor)


def _decode_pace(readings: Sequence[PaceReading]) -> float:
    """The decode term's pace so far, for pricing the prefills' decode part (1 until known)."""
    pace = measured_pace(readings)
    return 1.0 if pace is None else max(1.0, pace)
