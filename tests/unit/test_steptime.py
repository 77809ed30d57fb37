"""The step-time model against the interference study, and its shape as properties."""

from __future__ import annotations

from statistics import median

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.model_shape import model_preset
from tokenpilot.core import steptime
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.steptime import step_time_model

CATALOG = load_builtin_catalog()
LLAMA_8B = model_preset("llama-3.1-8b")
MODELS = {p.name: step_time_model(p, LLAMA_8B) for p in CATALOG.profiles}
# Interference that separates "absorbed" cells from "stepped" ones in the study's heatmap:
# measured cells up to 4K prefill tokens are at most +50 %, those from 8K up +70 % or more.
STEP_CUTOFF_PCT = 60.0


def _interference_pct(gpu: str, num_decode: int, num_prefill_tokens: int) -> float:
    model = MODELS[gpu]
    kv = num_decode * (model.calibration_context_tokens or 1024)
    base = model.iteration_s(num_decode, 0, kv)
    return (model.iteration_s(num_decode, num_prefill_tokens, kv) / base - 1) * 100


@pytest.mark.parametrize("gpu", ["H100-80GB"])
def test_every_heatmap_cell_lands_on_the_measured_side_of_the_step(gpu: str) -> None:
    heatmap = CATALOG.get(gpu).measured.heatmap  # type: ignore[union-attr]
    assert heatmap is not None
    for cell in heatmap.cells:
        measured_above = cell.interference_pct >= STEP_CUTOFF_PCT
        predicted = _interference_pct(gpu, heatmap.num_decode, cell.num_prefill_tokens)
        assert (predicted >= STEP_CUTOFF_PCT) == measured_above, (cell, predicted)


@pytest.mark.parametrize("gpu", ["H100-80GB", "H200"])
def test_diagonal_cells_are_over_the_threshold_and_stepped(gpu: str) -> None:
    # The study has no H200 heatmap; its cells are the 4 x 2048 diagonal, all over the step.
    measured = CATALOG.get(gpu).measured
    assert measured is not None
    model = MODELS[gpu]
    for row in measured.mixed_steps:
        if row.num_prefill_tokens > 2 * model.threshold_tokens:
            continue  # a many-step burst, not one step
        assert row.num_decode + row.num_prefill_tokens > model.threshold_tokens
        half = _interference_pct(gpu, row.num_decode, row.num_prefill_tokens // 2)
        full = _interference_pct(gpu, row.num_decode, row.num_prefill_tokens)
        assert full >= 2 * half and full >= half + 30, (row, half, full)


@pytest.mark.parametrize("gpu", ["H100-80GB", "H200", "L40S", "RTX-5090", "RTX-6000"])
def test_four_by_2048_diagonal_within_30_percent_of_the_study(gpu: str) -> None:
    measured = CATALOG.get(gpu).measured
    assert measured is not None
    model = MODELS[gpu]
    rows = [r for r in measured.mixed_steps if (r.num_prefill, r.prefill_len) == (4, 2048)]
    assert rows
    for row in rows:
        kv = row.num_decode * (model.calibration_context_tokens or 0)
        predicted_ms = model.iteration_s(row.num_decode, 8192, kv) * 1e3
        assert predicted_ms == pytest.approx(row.mixed_ms, rel=0.30), row


@pytest.mark.parametrize("gpu", ["H100-80GB", "H200", "L40S", "RTX-5090"])
def test_pure_decode_baselines_within_10_percent(gpu: str) -> None:
    measured = CATALOG.get(gpu).measured
    assert measured is not None
    model = MODELS[gpu]
    for step in measured.decode_steps:
        predicted_ms = model.decode_step_s(step.num_decode, model.calibration_context_tokens or 0)
        assert predicted_ms * 1e3 == pytest.approx(step.step_ms, rel=0.10), step


def test_faster_memory_gives_faster_decode_as_the_study_saw():
    # Baseline ~ 1/bandwidth: H200 < H100 < L40S < RTX 6000 at the same decode load.
    order = ["H200", "H100-80GB", "L40S", "RTX-6000"]
    steps = [MODELS[g].decode_step_s(8, 1024) for g in order]
    assert steps == sorted(steps)


def test_defaults_for_datasheet_only_gpus_come_from_the_measured_fits():
    efficiencies = [m.bandwidth_efficiency for m in MODELS.values() if m.measured]
    assert median(efficiencies) == pytest.approx(steptime.DEFAULT_BANDWIDTH_EFFICIENCY, abs=0.1)
    h100 = MODELS["H100-80GB"]
    assert h100.prefill_efficiency == pytest.approx(steptime.DEFAULT_PREFILL_EFFICIENCY, rel=0.1)
    assert not MODELS["A100-80GB"].measured
    assert "estimated" in MODELS["A100-80GB"].describe()


def test_tensor_parallelism_splits_weights_and_compute():
    h100 = CATALOG.get("H100")
    shape = model_preset("llama-3.1-70b")
    tp1, tp4 = step_time_model(h100, shape, 1), step_time_model(h100, shape, 4)
    assert tp4.weight_read_s == pytest.approx(tp1.weight_read_s / 4)
    assert tp4.compute_s_per_token == pytest.approx(tp1.compute_s_per_token / 4)
    assert tp4.threshold_tokens >= tp1.threshold_tokens


@pytest.mark.parametrize(("tp", "match"), [(0, "at least 1"), (3, "must divide")])
def test_bad_tensor_parallelism(tp: int, match: str) -> None:
    with pytest.raises(InvalidSpec, match=match):
        step_time_model(CATALOG.get("H100"), LLAMA_8B, tp)


@given(
    gpu=st.sampled_from(sorted(MODELS)),
    num_decode=st.integers(0, 512),
    num_prefill=st.integers(0, 32768),
    extra_prefill=st.integers(0, 8192),
    kv=st.integers(0, 2_000_000),
    extra_kv=st.integers(0, 200_000),
)
def test_more_prefill_or_more_context_never_makes_a_step_faster(
    gpu: str, num_decode: int, num_prefill: int, extra_prefill: int, kv: int, extra_kv: int
) -> None:
    model = MODELS[gpu]
    step = model.iteration_s(num_decode, num_prefill, kv)
    assert step > 0
    assert model.iteration_s(num_decode, num_prefill + extra_prefill, kv) >= step
    assert model.iteration_s(num_decode, num_prefill, kv + extra_kv) >= step
