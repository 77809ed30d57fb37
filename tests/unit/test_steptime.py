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
# A step counts as slowed by the burst above this much over the decode step (as the probe does).
SLOWED_MARGIN = 0.05


def _burst_ms(gpu: str, num_decode: int, num_prefill_tokens: int) -> tuple[float, float]:
    """Decode step and mean slowed step (ms) of a burst, scheduled as the engine does: each
    step carries every decode and prefill up to the budget, the budget being the study's
    threshold. A tail step that runs at decode speed does not count, as in the probe."""
    model = MODELS[gpu]
    budget = model.threshold_tokens
    kv = num_decode * (model.calibration_context_tokens or 1024)
    base_s = model.iteration_s(num_decode, 0, kv)
    steps_s = []
    left = num_prefill_tokens
    while left > 0:
        chunk = min(left, budget - num_decode)
        steps_s.append(model.iteration_s(num_decode, chunk, kv + chunk))
        left -= chunk
    slowed = [s for s in steps_s if s > base_s * (1 + SLOWED_MARGIN)] or steps_s
    return base_s * 1e3, sum(slowed) / len(slowed) * 1e3


def _interference_pct(gpu: str, num_decode: int, num_prefill_tokens: int) -> float:
    base_ms, mixed_ms = _burst_ms(gpu, num_decode, num_prefill_tokens)
    return (mixed_ms / base_ms - 1) * 100


def test_every_heatmap_cell_lands_on_the_measured_side_of_the_step() -> None:
    # H100 is the only GPU with a heatmap; H200's cells are its diagonal (the next tests).
    heatmap = CATALOG.get("H100-80GB").measured.heatmap  # type: ignore[union-attr]
    assert heatmap is not None
    for cell in heatmap.cells:
        measured_above = cell.interference_pct >= STEP_CUTOFF_PCT
        predicted = _interference_pct("H100-80GB", heatmap.num_decode, cell.num_prefill_tokens)
        assert (predicted >= STEP_CUTOFF_PCT) == measured_above, (cell, predicted)


@pytest.mark.parametrize("gpu", ["H100-80GB", "H200"])
def test_diagonal_cells_are_over_the_threshold_and_stepped(gpu: str) -> None:
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
    rows = [r for r in measured.mixed_steps if (r.num_prefill, r.prefill_len) == (4, 2048)]
    assert rows
    for row in rows:
        _, predicted_ms = _burst_ms(gpu, row.num_decode, row.num_prefill_tokens)
        assert predicted_ms == pytest.approx(row.mixed_ms, rel=0.30), row


# (GPU, decodes): the study's decode counts where its mixed step is over twice the baseline.
SHAPE_CASES = [
    ("H100-80GB", 8), ("H100-80GB", 32), ("H100-80GB", 64), ("H200", 8), ("H200", 32),
    ("L40S", 8), ("L40S", 16), ("L40S", 32), ("RTX-5090", 8), ("RTX-6000", 4),
]  # fmt: skip


@pytest.mark.parametrize(("gpu", "num_decode"), SHAPE_CASES)
def test_prefill_well_under_the_threshold_is_nearly_free_and_a_full_step_is_not(
    gpu: str, num_decode: int
) -> None:
    model = MODELS[gpu]
    threshold = model.threshold_tokens
    quarter = _interference_pct(gpu, num_decode, threshold // 4 - num_decode)
    full = _interference_pct(gpu, num_decode, threshold - num_decode)
    # About 10 %: RTX 5090's prefill rate is the datasheet's at the H100 efficiency (10.1 %).
    # The study: even 128 prefill tokens cost RTX 6000 over 60 %.
    if gpu != "RTX-6000":
        assert quarter < 12, quarter
    assert full > 100, full


@pytest.mark.parametrize("gpu", ["H100-80GB", "H200", "L40S", "RTX-5090"])
def test_pure_decode_baselines_within_10_percent(gpu: str) -> None:
    measured = CATALOG.get(gpu).measured
    assert measured is not None
    model = MODELS[gpu]
    for step in measured.decode_steps:
        predicted_ms = model.decode_step_s(step.num_decode, model.calibration_context_tokens or 0)
        assert predicted_ms * 1e3 == pytest.approx(step.step_ms, rel=0.10), step


def test_faster_memory_gives_faster_decode_as_the_study_saw() -> None:
    # Baseline ~ 1/bandwidth: H200 < H100 < L40S < RTX 6000 at the same decode load.
    order = ["H200", "H100-80GB", "L40S", "RTX-6000"]
    steps = [MODELS[g].decode_step_s(8, 1024) for g in order]
    assert steps == sorted(steps)


def test_defaults_for_datasheet_only_gpus_come_from_the_measured_fits() -> None:
    efficiencies = [m.bandwidth_efficiency for m in MODELS.values() if m.measured]
    assert median(efficiencies) == pytest.approx(steptime.DEFAULT_BANDWIDTH_EFFICIENCY, abs=0.1)
    h100 = MODELS["H100-80GB"]
    assert h100.prefill_efficiency == pytest.approx(steptime.DEFAULT_PREFILL_EFFICIENCY, rel=0.1)
    assert h100.excess_exponent == pytest.approx(steptime.DEFAULT_EXCESS_EXPONENT, abs=0.1)
    fractions = [
        max(m.excess_s) / (m.compute_s_per_token * m.threshold_tokens)
        for m in MODELS.values()
        if m.measured
    ]
    assert median(fractions) == pytest.approx(steptime.DEFAULT_EXCESS_FRACTION, rel=0.1)
    assert not MODELS["A100-80GB"].measured
    assert "estimated" in MODELS["A100-80GB"].describe()


def test_tensor_parallelism_splits_weights_and_compute() -> None:
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


@given(
    gpu=st.sampled_from(sorted(MODELS)),
    num_decode=st.integers(0, 512),
    num_prefill=st.integers(0, 32768),
    kv=st.integers(0, 2_000_000),
)
def test_no_cliff_one_more_token_costs_a_bounded_share_of_the_step(
    gpu: str, num_decode: int, num_prefill: int, kv: int
) -> None:
    # Roofline slopes and the power law's derivative bound the marginal token at (k + 1) x
    # the step's own mean cost per token; a cliff at the threshold would break this.
    model = MODELS[gpu]
    num_tokens = num_decode + num_prefill + 1
    after = model.iteration_s(num_decode, num_prefill + 1, kv)
    before = model.iteration_s(num_decode, num_prefill, kv)
    assert after - before <= (model.excess_exponent + 1) * after / num_tokens * 1.001
