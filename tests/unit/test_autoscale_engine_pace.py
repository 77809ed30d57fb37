"""The engines' measured pace: the ITL histogram's sum over its count against the model's price.

vLLM's inter-token latency histogram sums the seconds of every gap between two tokens, so over
an interval the mean step the decodes met is exact. Where it runs longer than the step model
prices the interval's load, the model prices every step that much longer
(core.autoscale.correction).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest
from autoscale_fleet import LINEAR_POLICY, LINEAR_REPLICA_MODEL, light_load
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.api.llmservice import ConditionStatus
from tokenpilot.core.autoscale.capacity import Demand, ReplicaModel
from tokenpilot.core.autoscale.correction import (
    MIN_ITL_GAPS,
    MIN_STEP_SAMPLES,
    PACE_TOLERANCE,
    PaceReading,
    engine_slowness,
    measured_pace,
    pace_reading,
)
from tokenpilot.core.autoscale.costs import EngineCosts, engine_pace
from tokenpilot.core.autoscale.loop import Action, ApplyStatus, PostEvent, ServiceState, step
from tokenpilot.core.autoscale.memory import restore, snapshot
from tokenpilot.core.autoscale.observation import Current, Load, Now
from tokenpilot.core.autoscale.pace import PaceMemory
from tokenpilot.core.autoscale.window import EngineSample, PodScrapes, observe_scrapes
from tokenpilot.core.roofline import ScaledPricer

MODEL = LINEAR_REPLICA_MODEL
EPOCH = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
POLICY = LINEAR_POLICY
INTERVAL_S = 5.0
REPLICAS = 8
MIX = Demand(0.0, 0.0, 1000.0, 100.0, 4000.0)
# 20,000 prompt and 2,000 output tokens/s over the fleet.
PROMPT, OUTPUT = 100_000.0, 10_000.0


def share_of(pods: int, prompt: float = PROMPT, output: float = OUTPUT) -> Demand:
    return Demand(
        prompt / INTERVAL_S / pods,
        output / INTERVAL_S / pods,
        MIX.mean_prompt_tokens,
        MIX.mean_output_tokens,
        MIX.tail_prompt_tokens,
    )


def engine_step_s(engine: ReplicaModel, share: Demand) -> float | None:
    """The mean step of engines priced as `engine` at `share`: the step whose own
    composition it is the price of (None where they cannot keep up)."""
    step_s = engine.pricer.iteration_s(0, 0)
    for _ in range(100):
        kinds = engine.steps_priced(share, step_s)
        if kinds is None:
            return None
        price_s = kinds.chunk_share * kinds.chunk_s + (1.0 - kinds.chunk_share) * kinds.alone_s
        if abs(price_s - step_s) <= 1e-9 * step_s:
            return price_s
        step_s = price_s
    return step_s


def interval(pace: float, pods: int = REPLICAS) -> Load:
    """One interval of the level load on `pods` pods whose engines run every step `pace` times
    the model's price: their mean step is the slowed model's own (a longer step batches more
    decodes). Faster engines, which no model may price, are the model's step times `pace`."""
    share = share_of(pods)
    step_s = (
        engine_step_s(MODEL.slowed(pace), share)
        if pace >= 1.0
        else (engine_step_s(MODEL, share) or 0.0) * pace
    )
    assert step_s
    return Load(INTERVAL_S, PROMPT, 0.0, OUTPUT, 100.0, pods, OUTPUT, OUTPUT * step_s)


def test_the_reading_is_the_engines_slowdown() -> None:
    reading = pace_reading(MODEL, interval(1.3), MIX, 0.0)
    assert reading is not None
    assert abs(reading.over_price - 1.3) < 1e-4
    # The chunk steps cost more than the decodes alone, so without them the same step reads
    # slower.
    assert reading.chunk_term > 0
    assert reading.over_alone > reading.over_price


@given(st.floats(1.0, 3.0), st.floats(0.05, 1.0), st.integers(1, 16))
def test_the_ratio_reads_the_slowdown_not_the_batch_it_brings(
    pace: float, load: float, pods: int
) -> None:
    """Engines slower than priced batch more decodes per step, and a step of more decodes
    costs more: the price of the model's own step would read the slowdown amplified (1.7 for
    1.5 on a light load). Priced at the batch the measured step carries, it reads the
    slowdown, wherever the slowed replica keeps up."""
    share = share_of(pods, PROMPT * load, OUTPUT * load)
    step_s = engine_step_s(MODEL.slowed(pace), share)
    if step_s is None:
        return
    measured = Load(
        INTERVAL_S, PROMPT * load, 0.0, OUTPUT * load, 100.0, pods, 1000.0, 1000.0 * step_s
    )
    reading = pace_reading(MODEL, measured, MIX, 0.0)
    assert reading is not None
    assert abs(reading.over_price - pace) < 1e-3 * pace


def test_an_interval_with_too_few_gaps_or_pods_prices_nothing() -> None:
    few = replace(interval(1.3), num_itl_gaps=MIN_ITL_GAPS - 1)
    assert pace_reading(MODEL, few, MIX, 0.0) is None
    assert pace_reading(MODEL, replace(interval(1.3), num_pods=0), MIX, 0.0) is None


def test_a_load_one_replica_cannot_keep_up_with_prices_nothing() -> None:
    swamped = replace(interval(1.0), num_pods=1, num_prompt_tokens=PROMPT * 1000)
    assert pace_reading(MODEL, swamped, MIX, 0.0) is None


@given(
    st.floats(0.5, 3.0),
    st.floats(0.0, 1.0),
    st.lists(st.integers(0, 200), min_size=MIN_STEP_SAMPLES, max_size=60, unique=True),
)
def test_the_pace_is_the_slowdown_however_often_the_decodes_meet_the_chunks(
    slowdown: float, met: float, hundredths: list[int]
) -> None:
    """Whether a decode meets a chunk step is the balancer's and the concurrency's doing, not
    the engines': each interval reads `slowdown (1 + met y)`, `met` the share of the chunk
    steps the decodes met. The pace is the slowdown whatever that share, where the median
    of the readings priced at the share steps carry reads it only where the decodes meet
    every chunk step in that share."""
    chunk_terms = [h / 100 for h in hundredths]
    readings = [
        PaceReading(float(i), slowdown * (1.0 + met * y), y) for i, y in enumerate(chunk_terms)
    ]
    pace = measured_pace(readings)
    assert pace is not None
    assert abs(pace - slowdown) <= 1e-9 * slowdown


def test_readings_of_one_load_read_as_priced() -> None:
    """A level load's intervals have nearly the same chunk term: they prove no line, and the
    pace is read as if the decodes met the chunk steps in the share steps carry them."""
    readings = [PaceReading(float(i), 1.3 * (1.0 + 0.1 + i * 1e-4), 0.1) for i in range(20)]
    pace = measured_pace(readings)
    assert pace == pytest.approx(statistics.median(r.over_price for r in readings))


@given(st.floats(0.5, 3.0), st.floats(1.0, 3.0), st.lists(st.floats(0.0, 2.0), max_size=40))
def test_decodes_crowded_with_the_chunks_read_no_faster_than_priced(
    slowdown: float, met: float, chunk_terms: list[float]
) -> None:
    """In a burst prompts and decodes crowd the same replicas, and the decodes meet chunk
    steps more often than steps carry them (`met` over 1): the pace reads the median priced
    at the share steps carry, slower than the engines run, the safe side; and nothing until
    there are enough readings."""
    readings = [
        PaceReading(float(i), slowdown * (1.0 + met * y), y) for i, y in enumerate(chunk_terms)
    ]
    pace = measured_pace(readings)
    if len(readings) < MIN_STEP_SAMPLES:
        assert pace is None
        assert engine_slowness(pace) == 1.0
        return
    assert pace is not None
    assert pace >= slowdown * (1.0 - 1e-9)
    assert pace == pytest.approx(statistics.median(r.over_price for r in readings))


@given(st.one_of(st.none(), st.floats(0.2, 5.0)))
def test_the_slowness_counts_only_a_pace_slower_than_the_tolerance(pace: float | None) -> None:
    slowness = engine_slowness(pace)
    if pace is not None and pace > 1.0 + PACE_TOLERANCE:
        assert slowness == pace
    else:
        assert slowness == 1.0


@dataclass
class Run:
    """The loop on the level load with every replica it asks for Ready: each evaluation's
    (replicas, words), every action, and where it ended."""

    state: ServiceState
    replicas: int
    words: list[tuple[int, str]]
    actions: list[Action]


def loop(pace: float, num_intervals: int) -> Run:
    """`num_intervals` evaluations of the level load on engines at `pace`."""
    result = Run(ServiceState(POLICY, interval_s=INTERVAL_S), REPLICAS, [], [])
    for index in range(num_intervals):
        at_s = INTERVAL_S * (index + 1)
        replicas = result.replicas
        seen = replace(light_load(at_s, ready=replicas), load=interval(pace, replicas))
        current = Current(spec_replicas=replicas, ready_replicas=replicas)
        result.state, decision, done = step(result.state, seen, current, Now(at_s, wall(at_s)))
        result.replicas = decision.desired_replicas
        result.words.append((result.replicas, decision.reason))
        result.actions += done
    return result


def run(pace: float, num_intervals: int) -> list[tuple[int, str]]:
    return loop(pace, num_intervals).words


def test_engines_slower_than_priced_get_the_fleet_their_measured_pace_needs() -> None:
    priced = run(1.0, 130)
    slow = run(1.6, 130)
    assert all("measured pace" not in words for _, words in priced)
    replicas, words = slow[-1]
    assert "at the engines' measured pace, 1.6x its price" in words
    assert replicas > priced[-1][0]


def test_engines_faster_than_priced_keep_the_profiles_margin() -> None:
    assert run(0.7, 130)[-1] == run(1.0, 130)[-1]


def test_a_pace_within_the_models_own_error_changes_nothing() -> None:
    assert run(1.0 + PACE_TOLERANCE * 0.9, 130)[-1] == run(1.0, 130)[-1]


def test_the_mean_step_is_read_from_two_scrapes_of_each_pod() -> None:
    def sample(at_s: float, gaps: float, seconds: float) -> EngineSample:
        return EngineSample(
            at_s, 0.0, 2.0, 0.1, ((0.05, gaps), (float("inf"), gaps)), None,
            prompt_tokens_total=1000.0 * at_s, cached_prompt_tokens_total=0.0,
            output_tokens_total=gaps, requests_total=at_s, itl_sum_s=seconds,
        )  # fmt: skip

    rings: dict[str, tuple[EngineSample, ...]] = {}
    for at_s, (gaps_a, sum_a), (gaps_b, sum_b) in [
        (0.0, (0.0, 0.0), (100.0, 2.0)),
        (5.0, (400.0, 12.0), (300.0, 8.0)),
    ]:
        scrapes = PodScrapes(
            at_s, {"a": sample(at_s, gaps_a, sum_a), "b": sample(at_s, gaps_b, sum_b)}, 2
        )
        rings, observation = observe_scrapes(
            rings, scrapes, spec_replicas=2, ready_replicas=2, window_s=30.0
        )
    load = observation.load
    assert load is not None
    assert load.num_pods == 2
    assert load.num_itl_gaps == 400.0 + 200.0
    assert load.itl_sum_s == 12.0 + 6.0


def test_a_step_price_is_never_scaled_below_the_profiles() -> None:
    """The profile is already under the datasheet's floor by its fitted efficiencies; a factor
    under 1 could price a step faster than the GPU can run it."""
    with pytest.raises(ValueError, match="only be scaled up"):
        ScaledPricer(MODEL.pricer, 0.9)
    assert MODEL.slowed(1.5).pricer.iteration_s(1, 1) == 1.5 * MODEL.pricer.iteration_s(1, 1)


def ratios(pace: float, num: int) -> EngineCosts:
    """The costs measured over `num` intervals whose steps read `pace`."""
    return PaceMemory.of([PaceReading(INTERVAL_S * i, pace, 0.0) for i in range(num)]).costs


def test_the_pace_condition_is_unknown_until_measured_then_says_which_way() -> None:
    unmeasured = engine_pace(MODEL, ratios(1.6, MIN_STEP_SAMPLES - 1), 500.0)
    assert unmeasured.status is ConditionStatus.unknown
    assert unmeasured.reason == "PaceNotMeasured"
    for pace in (0.7, 1.0, 1.0 + PACE_TOLERANCE * 0.9):
        assert engine_pace(MODEL, ratios(pace, 20), 500.0).status is ConditionStatus.true
    slow = engine_pace(MODEL, ratios(1.6, 20), 500.0)
    assert (slow.status, slow.reason) == (ConditionStatus.false, "SlowerThanProfile")
    assert "1.6x the step model's price" in slow.message
    assert "recalibrate" in slow.message


def test_a_pace_that_makes_the_budget_break_the_itl_at_any_fleet_names_the_fix() -> None:
    """One decode beside a whole 1,200-token chunk: 41 ms at the profile's price, 53 ms at
    1.3x, over the 50 ms target however few requests each replica serves."""
    model = replace(MODEL, token_budget=1200)
    assert model.chunk_alone_step_s() < 0.05 < model.slowed(1.3).chunk_alone_step_s()
    pace = engine_pace(model, ratios(1.3, 20), 500.0)
    assert (pace.status, pace.reason) == (ConditionStatus.false, "BudgetBreaksItl")
    assert "1200-token budget takes 53 ms, over the 50 ms P99 ITL target" in pace.message
    assert "spec.batching.maxNumBatchedTokens" in pace.message
    assert "--engine-slowdown 1.3" in pace.message
    # A budget that breaks the ITL at the profile's own price is the tuning's to report
    # (status.tuning), not news of the engines' pace.
    assert engine_pace(MODEL, ratios(1.3, 20), 500.0).reason == "SlowerThanProfile"


def pace_conditions(actions: list[Action]) -> list[tuple[str, str]]:
    applied = [a.owned for a in actions if isinstance(a, ApplyStatus)]
    return [
        (c["status"], c["reason"])
        for owned in applied
        for c in owned.get("conditions", [])
        if c["type"] == "PaceAsProfiled"
    ]


def test_the_status_says_the_engines_run_slower_and_warns_once() -> None:
    slow = loop(1.6, 130).actions
    seen = pace_conditions(slow)
    assert seen[0] == ("Unknown", "PaceNotMeasured")
    assert seen[-1] == ("False", "SlowerThanProfile")
    warnings = [a.event for a in slow if isinstance(a, PostEvent) and a.event.warning]
    assert [(w.reason, w.warning) for w in warnings] == [("SlowerThanProfile", True)]
    # Every status the loop applied still carries the metrics condition beside it.
    for action in slow:
        if isinstance(action, ApplyStatus):
            types = [c["type"] for c in action.owned["conditions"]]
            assert types == ["MetricsAvailable", "PaceAsProfiled"]


def test_engines_at_the_profiles_pace_say_so_and_warn_of_nothing() -> None:
    priced = loop(1.0, 130).actions
    assert pace_conditions(priced)[-1] == ("True", "AsProfiled")
    assert not [a for a in priced if isinstance(a, PostEvent) and a.event.warning]


def test_a_restarted_operator_keeps_the_engines_measured_pace() -> None:
    """The pace is in the memory a restart restores (core.autoscale.memory), so the first
    evaluation of a new process sizes the fleet at it; a memory without it (written before
    it was kept) measures it afresh."""
    slow = loop(1.6, 40)
    replicas = slow.replicas
    memory = snapshot(slow.state, Now(200.0, wall(200.0)))
    assert memory is not None
    old = {k: v for k, v in memory.items() if k != "paceReadings"}

    def first_words(written: dict) -> str:
        # The new process: its own clock from 0, 10 s of wall time later.
        restored = restore(ServiceState(POLICY, interval_s=INTERVAL_S), written, Now(0, wall(210)))
        seen = replace(light_load(5.0, ready=replicas), load=interval(1.6, replicas))
        current = Current(spec_replicas=replicas, ready_replicas=replicas)
        return step(restored, seen, current, Now(5.0, wall(215.0)))[1].reason

    assert "at the engines' measured pace, 1.6x its price" in first_words(memory)
    assert "measured pace" not in first_words(old)


def wall(at_s: float) -> str:
    return (EPOCH + timedelta(seconds=at_s)).isoformat().replace("+00:00", "Z")


def test_a_memory_restored_after_its_forecast_has_aged_out_keeps_no_pace() -> None:
    """The ratios describe the engines of the forecast's memory (500 s here): a memory
    restored 20 minutes after it was written sizes at the profile's pace again until it has
    measured afresh."""
    memory = snapshot(loop(1.6, 40).state, Now(200.0, wall(200.0)))
    assert memory is not None
    fresh = ServiceState(POLICY, interval_s=INTERVAL_S)
    assert restore(fresh, memory, Now(0.0, wall(210.0))).pace.readings
    assert not restore(fresh, memory, Now(0.0, wall(200.0 + 1200.0))).pace.readings
