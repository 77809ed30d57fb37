"""Histogram quantiles and counter rates behave like PromQL's, including on vLLM's coarse ITL
buckets, where the interpolation error is measured against exact quantiles of sampled latencies.
"""

from __future__ import annotations

import bisect
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.core.histogram import (
    bucket_upper_bound,
    counter_increase,
    counter_rate,
    quantile,
    window_delta,
)
from tokenpilot.core.vllm_metrics import TOKEN_LATENCY_BUCKETS_S as ITL_BUCKETS_S

INF = math.inf


def _bucketize(samples: list[float], bounds: tuple[float, ...]) -> list[tuple[float, float]]:
    ordered = sorted(samples)
    edges = [*bounds, INF]
    return [(edge, float(bisect.bisect_right(ordered, edge))) for edge in edges]


def _exact(q: float, samples: list[float]) -> float:
    """The rank-ceil(q*n) sample: the value a P99 SLO is about."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.5, [(0.1, 10), (0.2, 20), (INF, 20)], 0.1),
        (0.75, [(0.1, 10), (0.2, 20), (INF, 20)], 0.15),
        (1.0, [(0.1, 10), (0.2, 20), (INF, 20)], 0.2),
        (0.25, [(0.1, 10), (0.2, 20), (INF, 20)], 0.05),
        # rank in the +Inf bucket: the highest finite bound
        (0.99, [(0.1, 5), (INF, 10)], 0.1),
        # unsorted input and non-monotonic counts are repaired
        (0.75, [(INF, 20), (0.2, 19), (0.1, 10), (0.15, 21)], 0.1 + 0.05 * (5.75 / 11)),
    ],
)
def test_quantile_matches_histogram_quantile(q, buckets, expected):
    assert quantile(q, buckets).value == pytest.approx(expected)


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.99, [], "nan"),
        (0.99, [(0.1, 5), (0.2, 10)], "nan"),  # no +Inf bucket
        (0.99, [(0.1, 0), (INF, 0)], "nan"),  # no observations: idle, not an error
        (-0.1, [(0.1, 5), (INF, 10)], "-inf"),
        (1.1, [(0.1, 5), (INF, 10)], "inf"),
    ],
)
def test_quantile_edge_cases(q, buckets, expected):
    value = quantile(q, buckets).value
    assert str(value) == expected


def test_window_delta_subtracts_and_survives_a_restart():
    earlier = [(0.1, 10.0), (0.2, 20.0), (INF, 25.0)]
    later = [(0.1, 12.0), (0.2, 30.0), (INF, 40.0)]
    assert window_delta(earlier, later) == ((0.1, 2.0), (0.2, 10.0), (INF, 15.0))
    restarted = [(0.1, 1.0), (0.2, 2.0), (INF, 3.0)]
    assert window_delta(earlier, restarted) == ((0.1, 1.0), (0.2, 2.0), (INF, 3.0))


@pytest.mark.parametrize(
    ("samples", "increase", "rate"),
    [
        ([(0.0, 10.0), (5.0, 20.0), (10.0, 30.0)], 20.0, 2.0),
        ([(0.0, 10.0), (5.0, 20.0), (10.0, 3.0)], 13.0, 1.3),  # reset after 5 s
        ([(0.0, 10.0)], 0.0, math.nan),
    ],
)
def test_counter_increase_and_rate(samples, increase, rate):
    assert counter_increase(samples) == pytest.approx(increase)
    if math.isnan(rate):
        assert math.isnan(counter_rate(samples))
    else:
        assert counter_rate(samples) == pytest.approx(rate)


def test_bucket_upper_bound():
    assert bucket_upper_bound(ITL_BUCKETS_S, 0.03) == 0.05
    assert bucket_upper_bound(ITL_BUCKETS_S, 0.05) == 0.05
    assert bucket_upper_bound(ITL_BUCKETS_S, 1e9) == INF
    assert math.isnan(bucket_upper_bound(ITL_BUCKETS_S, math.nan))


latencies = st.lists(st.floats(0.001, 2.0), min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(latencies, st.sampled_from([0.5, 0.9, 0.99]))
def test_estimate_and_exact_share_a_bucket(samples, q):
    estimate = quantile(q, _bucketize(samples, ITL_BUCKETS_S))
    exact = _exact(q, samples)
    assert estimate.lower_bound <= estimate.value <= estimate.upper_bound
    assert estimate.lower_bound <= exact <= estimate.upper_bound


@settings(max_examples=200, deadline=None)
@given(latencies, st.sampled_from(ITL_BUCKETS_S[:8]))
def test_breach_test_is_exact_when_the_slo_is_a_bucket_edge(samples, slo_s):
    """estimate > SLO exactly when more than 1% of the samples exceed the SLO."""
    estimate = quantile(0.99, _bucketize(samples, ITL_BUCKETS_S))
    over = sum(1 for s in samples if s > slo_s) / len(samples)
    assert (estimate.value > slo_s) == (over > 1 - 0.99 + 1e-12)


# Decode-step latencies a P99 ITL SLO of 25-100 ms is about. "interference" mimics a step
# function: most steps decode-only, a few carrying a prefill chunk (seed 004's pattern).
DISTRIBUTIONS = {
    "lognormal 15 ms": lambda rng: rng.lognormvariate(math.log(0.015), 0.25),
    "lognormal 30 ms": lambda rng: rng.lognormvariate(math.log(0.030), 0.35),
    "lognormal 60 ms": lambda rng: rng.lognormvariate(math.log(0.060), 0.3),
    "gamma 20 ms": lambda rng: rng.gammavariate(4.0, 0.005),
    "interference 12/45 ms": lambda rng: (
        rng.gauss(0.045, 0.004) if rng.random() < 0.03 else rng.gauss(0.012, 0.001)
    ),
}


def interpolation_errors(num_samples: int = 20_000, seed: int = 7) -> dict[str, tuple]:
    """(exact P99, interpolated P99, relative error, bucket width) per distribution."""
    rng = random.Random(seed)
    table = {}
    for name, draw in DISTRIBUTIONS.items():
        samples = [max(1e-4, draw(rng)) for _ in range(num_samples)]
        estimate = quantile(0.99, _bucketize(samples, ITL_BUCKETS_S))
        exact = _exact(0.99, samples)
        table[name] = (
            exact,
            estimate.value,
            (estimate.value - exact) / exact,
            estimate.upper_bound - estimate.lower_bound,
        )
    return table


def test_interpolated_p99_error_on_vllm_itl_buckets():
    """The figures docs/autoscaling.md quotes: tens of percent at the low end, never more than
    the bucket's width, and the upper edge is always a safe bound."""
    table = interpolation_errors()
    for name, (exact, estimate, relative, width) in table.items():
        print(
            f"{name:24s} exact {exact * 1e3:6.1f} ms  interpolated {estimate * 1e3:6.1f} ms  "
            f"error {relative:+6.1%}  bucket {width * 1e3:.0f} ms"
        )
        assert abs(estimate - exact) <= width
        assert bucket_upper_bound(ITL_BUCKETS_S, estimate) >= exact
    worst = max(abs(relative) for _, _, relative, _ in table.values())
    assert worst < 0.5
