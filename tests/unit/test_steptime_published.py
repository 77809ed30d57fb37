"""The step model against published measurements: the profiles carry the fit, and the points
not used to fit it are predicted within 25 % (docs/tuning.md prints the same table)."""

from __future__ import annotations

import pytest
from _bench import load

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.core.roofline import step_floor_s, step_work
from tokenpilot.core.steptime import step_time_model

CATALOG = load_builtin_catalog()
FIT = load("step_model_fit")
POINTS, _ = FIT.load_points()
FITTED = FIT.fit(POINTS)
BY_ID = {p.id: p for p in POINTS}

# The (GPU, model) pairs docs/tuning.md puts beside their sources: prefill and decode, all held
# out of the fit.
PAIRS = [
    "splitwise-a100-prefill-4096",
    "splitwise-a100-decode-8",
    "splitwise-h100-prefill-4096",
    "splitwise-h100-decode-8",
    "trtllm-a100-70b-tp4-2048",
    "ci-a100-70b-tp4",
    "trtllm-a100-7b-2048",
    "ci-a100-8b",
    "wmx-l4-qwen-0.5b",
    "lmdeploy-a10-7b",
]
# The prompts near the ridge, all held out: the overlap exponent is fitted on kernel timings, and
# these end-to-end times check it on two architectures (docs/tuning.md, "The smooth roofline").
NEAR_RIDGE = [
    "splitwise-a100-prefill-128",
    "splitwise-a100-prefill-256",
    "splitwise-a100-prefill-512",
    "splitwise-h100-prefill-128",
    "splitwise-h100-prefill-256",
    "splitwise-h100-prefill-512",
    "trtllm-a100-7b-128",
    "trtllm-a100-70b-tp4-128",
]


def _error(point_id: str) -> float:
    point = BY_ID[point_id]
    model = step_time_model(CATALOG.get(point.gpu), point.shape, point.tp)
    predicted = FIT.predict_ms(point, model, FIT.engine_overhead_ms(point, FITTED, model))
    return float(predicted / point.published_ms - 1)


def test_the_profiles_carry_the_fit() -> None:
    for profile in CATALOG.profiles:
        params = profile.step_model
        assert params is not None
        assert params.bandwidth_efficiency.value == pytest.approx(
            FITTED["bandwidth efficiency"], abs=0.006
        )
        assert params.overhead_ms.value == pytest.approx(FITTED["overhead ms vllm-v1"], abs=0.05)
        assert params.all_reduce_latency_us.value == pytest.approx(
            FITTED["all-reduce latency us"], abs=0.5
        )
        assert params.overlap_exponent.value == pytest.approx(FITTED["overlap exponent"], abs=0.05)
    for gpu, arch in FIT.ARCHITECTURE.items():
        assert CATALOG.get(gpu).step_model.compute_efficiency.value == pytest.approx(  # type: ignore[union-attr]
            FITTED[f"compute efficiency {arch}"], abs=0.006
        )


def test_fit_and_held_out_points_are_disjoint_and_every_pair_is_held_out() -> None:
    roles = {p.role for p in POINTS}
    assert roles == {"fit", "heldout"}
    for point_id in [*PAIRS, *NEAR_RIDGE]:
        assert BY_ID[point_id].role == "heldout", point_id


def test_the_overlap_exponent_is_fitted_on_kernels_and_lies_between_sum_and_max() -> None:
    kernels = FIT.load_kernels()
    assert {k.gpu for k in kernels} >= {"A100-80GB", "H100-80GB"}
    # Neither limit describes the kernels: p = 1 adds compute and memory, p = inf takes the max.
    assert 1.2 < FITTED["overlap exponent"] < 3
    for gpu in ("A100-80GB", "H100-80GB"):
        assert FITTED[f"kernel compute efficiency {gpu}"] < 1
        assert FITTED[f"kernel bandwidth efficiency {gpu}"] < 1


@pytest.mark.parametrize("point_id", PAIRS)
def test_the_documented_pairs_are_within_25_percent(point_id: str) -> None:
    assert abs(_error(point_id)) <= 0.25


def test_every_held_out_point_is_within_25_percent() -> None:
    for point in POINTS:
        if point.role == "heldout":
            assert abs(_error(point.id)) <= 0.25, point.id


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.id)
def test_no_published_point_beats_its_datasheet_floor(point: object) -> None:
    p = BY_ID[point.id]  # type: ignore[attr-defined]
    profile = CATALOG.get(p.gpu)
    work = step_work(p.shape, p.tp)
    floor_s = sum(
        step_floor_s(work, profile.bf16_dense_tflops, profile.hbm_bandwidth_gbps, d, c, chunks)
        for d, c, chunks in p.steps()
    )
    assert floor_s * 1e3 < p.published_ms
