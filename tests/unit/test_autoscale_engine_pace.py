"""The engines' measured pace: the ITL histogram's sum over its count against the model's price.

vLLM's inter-token latency histogram sums the seconds of every gap between two tokens, so over
an interval the mean step the decodes met is exact. Where it runs longer than the step model
prices the interval's load, the model prices every step that much longer
(core.autoscale.correction).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from autoscale_fleet import LINEAR_POLICY, LINEAR_REPLICA_MODEL, light_load
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.autoscale.capacity import Demand
from tokenpilot.core.autoscale.correction import (
    MIN_ITL_GAPS,
    MIN_STEP_SAMPLES,
    PACE_TOLERANCE,
    engine_slowness,
    step_ratio,
)
from tokenpilot.core.autoscale.loop import Current, Now, ServiceState, step
from tokenpilot.core.autoscale.observation import Load
from tokenpilot.core.autoscale.window import EngineSample, PodScrapes, observe_scrapes
from tokenpilot.core.roofline import ScaledPricer

MODEL = LINEAR_REPLICA_MODEL
POLICY = LINEAR_POLICY
INTERVAL_S = 5.0
REPLICAS = 8
MIX = Demand(0.0, 0.0, 1000.0, 100.0, 4000.0)
# 20,000 prompt and 2,000 output tokens/s over the fleet.
PROMPT, OUTPUT = 100_000.0, 10_000.0


def interval(pace: float, pods: int = REPLICAS) -> Load:
    """One interval of the level load on `pods` pods whose decodes met steps `pace` times
    the model's price of that load."""
    share = Demand(
        PROMPT / INTERVAL_S / pods,
        OUTPUT / INTERVAL_S / pods,
        MIX.mean_prompt_tokens,
        MIX.mean_output_tokens,
        MIX.tail_prompt_tokens,
    )
    priced_s = MODEL.mean_decode_step_s(share)
    assert priced_s is not None
    return Load(INTERVAL_S, PROMPT, 0.0, OUTPUT, 100.0, pods, OUTPUT, OUTPUT * priced_s * pace)


def test_the_ratio_is_the_mean_step_over_the_models_price() -> None:
    ratio = step_ratio(MODEL, interval(1.3), MIX)
    assert ratio is not None
    assert abs(ratio - 1.3) < 1e-9


def test_an_interval_with_too_few_gaps_or_pods_prices_nothing() -> None:
    few = replace(interval(1.3), num_itl_gaps=MIN_ITL_GAPS - 1)
    assert step_ratio(MODEL, few, MIX) is None
    assert step_ratio(MODEL, replace(interval(1.3), num_pods=0), MIX) is None


def test_a_load_one_replica_cannot_keep_up_with_prices_nothing() -> None:
    swamped = replace(interval(1.0), num_pods=1, num_prompt_tokens=PROMPT * 1000)
    assert step_ratio(MODEL, swamped, MIX) is None


@given(st.lists(st.floats(0.2, 5.0), max_size=40))
def test_the_slowness_is_the_median_at_least_one_and_needs_enough_samples(
    ratios: list[float],
) -> None:
    slowness = engine_slowness([(float(i), r) for i, r in enumerate(ratios)])
    if len(ratios) < MIN_STEP_SAMPLES:
        assert slowness == 1.0
        return
    ordered = sorted(ratios)
    median = (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2
    if median > 1.0 + PACE_TOLERANCE:
        assert slowness == median
    else:
        assert slowness == 1.0


def run(pace: float, num_intervals: int) -> list[tuple[int, str]]:
    """The loop on the level load, engines at `pace`, every replica it asks for Ready."""
    state, replicas, out = ServiceState(POLICY, interval_s=INTERVAL_S), REPLICAS, []
    for index in range(num_intervals):
        at_s = INTERVAL_S * (index + 1)
        seen = replace(light_load(at_s, ready=replicas), load=interval(pace, replicas))
        current = Current(spec_replicas=replicas, ready_replicas=replicas)
        state, decision, _ = step(state, seen, current, Now(at_s, f"t{index}"))
        replicas = decision.desired_replicas
        out.append((replicas, decision.reason))
    return out


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
            rings, scrapes, desired_replicas=2, ready_replicas=2, window_s=30.0
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
