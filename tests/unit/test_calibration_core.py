"""The calibration core: the grid's bursts, the fit of the step model, its thresholds and
refusals, and the profile it writes (issue 12)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.adapters.profiles import load_builtin_catalog, parse_configmap_data
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.model_shape import model_preset
from tokenpilot.core.calibration.derive import (
    Datasheet,
    Identity,
    PointResult,
    build_profile,
    observations,
    refusals,
    threshold_tokens,
)
from tokenpilot.core.calibration.fit import FitError, fit_step_rates
from tokenpilot.core.calibration.grid import BurstKind, GridSize, burst_steps, plan_grid
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.profiles import merge_catalogs, parse_profile, profile_yaml
from tokenpilot.core.roofline import PrefillChunk, step_work
from tokenpilot.core.steptime import StepTimeModel, step_time_model

CATALOG = load_builtin_catalog()
SHAPE = model_preset("llama-3.2-1b")
WORK = step_work(SHAPE, 1)
BUDGET = 1024


def hidden_profile(
    sku: str, compute: float, bandwidth: float, p: float, overhead_ms: float
) -> GPUProfile:
    base = CATALOG.get(sku)
    assert base.step_model is not None
    values = {
        "compute_efficiency": compute,
        "bandwidth_efficiency": bandwidth,
        "overlap_exponent": p,
        "overhead_ms": overhead_ms,
    }
    step_model = base.step_model.model_copy(
        update={
            name: getattr(base.step_model, name).model_copy(update={"value": v})
            for name, v in values.items()
        }
    )
    return base.model_copy(update={"step_model": step_model, "measured": None})


def measure(model: StepTimeModel, size: GridSize, scale: float = 1.0) -> list[PointResult]:
    """Exact step times of every grid point, as a noise-free engine would report them."""
    results = []
    for point in plan_grid(size, BUDGET, 8192, 200_000):
        context = point.num_decode * point.context_tokens
        steps = burst_steps(
            point.num_decode, context, [point.prefill_len] * point.num_prefill, BUDGET
        )
        mixed = sum(
            model.iteration_s(s.num_decode, s.decode_context_tokens, s.prefill_chunks)
            for s in steps
        ) / len(steps)
        baseline = model.iteration_s(point.num_decode, context)
        results.append(
            PointResult(point, baseline * scale, mixed * scale, len(steps), point.context_tokens)
        )
    return results


def identity(base: GPUProfile | None, name: str = "TEST-GPU") -> Identity:
    return Identity(
        gpu_name=name,
        base=base,
        memory_gib=24.0,
        endpoint="http://engine:8000",
        engine="vLLM 0.32.0",
        model="tiny",
        model_shape="llama-3.2-1b",
        grid="quick",
        date="2026-11-24T04:00:00Z",
        duration_s=12.0,
    )


def test_a_burst_over_the_budget_fills_one_step_per_prompt_and_one_under_it_one_step() -> None:
    room = BUDGET - 8
    over = burst_steps(8, 8 * 256, [room] * 4, BUDGET)
    assert [s.prefill_chunks for s in over] == [(PrefillChunk(room, 0),)] * 4
    under = burst_steps(8, 8 * 256, [room // 2] * 2, BUDGET)
    assert len(under) == 1 and len(under[0].prefill_chunks) == 2
    # A prompt longer than the room continues where it stopped.
    split = burst_steps(8, 8 * 256, [room + 10], BUDGET)
    assert [s.prefill_chunks for s in split] == [
        (PrefillChunk(room, 0),),
        (PrefillChunk(10, room),),
    ]


def test_the_grid_has_bursts_under_and_over_the_budget_and_holds_points_out() -> None:
    for size in GridSize:
        points = plan_grid(size, BUDGET, 8192)
        kinds = {p.kind for p in points}
        assert kinds == {BurstKind.under, BurstKind.over}
        assert all(
            p.burst_tokens <= BUDGET - p.num_decode for p in points if p.kind is BurstKind.under
        )
        held = [p for p in points if p.held_out]
        assert 0 < len(held) < len(points) / 2
    assert len(plan_grid(GridSize.full, BUDGET, 8192)) > len(
        plan_grid(GridSize.quick, BUDGET, 8192)
    )


def test_a_grid_that_cannot_fit_the_engine_says_which_flag_to_raise() -> None:
    with pytest.raises(InvalidSpec, match="--max-model-len"):
        plan_grid(GridSize.quick, BUDGET, 300)


@pytest.mark.parametrize("size", list(GridSize))
def test_the_smallest_budget_a_grid_names_is_one_it_can_calibrate(size: GridSize) -> None:
    # An engine the tuner put on a small budget (176 tokens, say) is calibrated where it runs;
    # below the grid's smallest budget the refusal names that budget.
    with pytest.raises(InvalidSpec, match=r"a budget of at least (\d+) tokens") as refused:
        plan_grid(size, 100, 8192)
    smallest = int(str(refused.value).rsplit("at least ", 1)[1].split()[0])
    assert len(plan_grid(size, smallest, 8192)) >= 8
    with pytest.raises(InvalidSpec):
        plan_grid(size, smallest - 1, 8192)
    assert len(plan_grid(GridSize.quick, 176, 8192)) >= 8


@settings(max_examples=8, deadline=None)
@given(
    compute=st.floats(0.05, 0.95),
    bandwidth=st.floats(0.05, 0.95),
    p=st.floats(1.0, 6.0),
    overhead_ms=st.floats(0.1, 8.0),
    sku=st.sampled_from(["H100-80GB", "L4", "A10G", "A100-80GB"]),
)
def test_fitting_exact_step_times_of_a_profile_recovers_its_step_times(
    compute: float, bandwidth: float, p: float, overhead_ms: float, sku: str
) -> None:
    hidden = step_time_model(hidden_profile(sku, compute, bandwidth, p, overhead_ms), SHAPE)
    results = measure(hidden, GridSize.quick)
    fit = fit_step_rates(WORK, observations(results, BUDGET))
    assert fit.max_held_out_error() < 1e-3
    rates = fit.rates
    assert rates.overhead_s == pytest.approx(overhead_ms / 1e3, rel=0.02, abs=2e-5)
    assert 1 / rates.s_per_byte == pytest.approx(bandwidth * hidden.bandwidth_gbps * 1e9, rel=0.01)
    recovered = step_time_model(
        build_profile(fit, results, SHAPE, identity(CATALOG.get(sku), sku), BUDGET), SHAPE
    )
    for decodes, context, prefill in ((3, 700, 0), (40, 900, 333), (20, 3000, 900)):
        chunks = (PrefillChunk(prefill),) if prefill else ()
        assert recovered.iteration_s(decodes, decodes * context, chunks) == pytest.approx(
            hidden.iteration_s(decodes, decodes * context, chunks), rel=0.01
        )


def test_a_compute_heavy_fit_pins_the_compute_rate_and_says_how_well() -> None:
    hidden = step_time_model(hidden_profile("L4", 0.6, 0.9, 2.0, 1.0), SHAPE)
    fit = fit_step_rates(WORK, observations(measure(hidden, GridSize.full), BUDGET))
    assert 1 / fit.rates.s_per_flop == pytest.approx(0.6 * hidden.peak_tflops * 1e12, rel=0.01)
    assert all(u < 0.01 for u in fit.relative_uncertainty[:3])


def test_the_written_profile_parses_and_carries_its_provenance() -> None:
    base = CATALOG.get("A10G")
    hidden = step_time_model(hidden_profile("A10G", 0.4, 0.7, 1.8, 2.0), SHAPE)
    results = measure(hidden, GridSize.quick)
    fit = fit_step_rates(WORK, observations(results, BUDGET))
    profile = build_profile(fit, results, SHAPE, identity(base, "A10G"), BUDGET)
    reparsed = parse_profile(profile_yaml(profile), "calibrated.yaml")
    assert reparsed.calibration is not None
    assert reparsed.calibration.engine == "vLLM 0.32.0"
    assert [t.itl_ms for t in reparsed.calibration.thresholds] == [25.0, 50.0, 100.0]
    assert reparsed.step_model is not None
    assert reparsed.step_model.bandwidth_efficiency.value == pytest.approx(0.7, rel=0.01)
    assert reparsed.measured is not None and reparsed.measured.provenance.model == "llama-3.2-1b"
    assert reparsed.hbm_bandwidth_gbps == base.hbm_bandwidth_gbps


def test_without_a_datasheet_the_achieved_rates_are_the_peaks_and_no_floor_is_checked() -> None:
    hidden = step_time_model(hidden_profile("A10G", 0.4, 0.7, 1.8, 2.0), SHAPE)
    results = measure(hidden, GridSize.quick)
    fit = fit_step_rates(WORK, observations(results, BUDGET))
    profile = build_profile(fit, results, SHAPE, identity(None, "CPU-TEST"), BUDGET)
    assert profile.step_model is not None
    assert profile.step_model.compute_efficiency.value == 1.0
    assert profile.hbm_bandwidth_gbps == pytest.approx(0.7 * 600, rel=0.01)
    assert refusals(fit, results, WORK, Datasheet(None, None), BUDGET) == []


def test_thresholds_grow_with_the_itl_and_stop_where_the_decodes_alone_exceed_it() -> None:
    model = step_time_model(CATALOG.get("H100-80GB"), SHAPE)
    t25, t50, t100 = (threshold_tokens(model, 32, 1024, s) for s in (0.025, 0.05, 0.1))
    assert 0 < t25 < t50 < t100
    assert model.iteration_s(32, 32 * 1024, [PrefillChunk(t50)]) <= 0.05
    assert model.iteration_s(32, 32 * 1024, [PrefillChunk(t50 + 1)]) > 0.05
    assert threshold_tokens(model, 32, 1024, 1e-4) == 0


def test_noisy_data_is_refused_for_its_residual() -> None:
    hidden = step_time_model(hidden_profile("A10G", 0.4, 0.7, 1.8, 2.0), SHAPE)
    results = measure(hidden, GridSize.quick)
    # A loaded machine: the held-out points ran 60 % slow.
    noisy = [
        dataclasses.replace(r, baseline_s=r.baseline_s * 1.6, mixed_s=r.mixed_s * 1.6)
        if r.point.held_out
        else r
        for r in results
    ]
    fit = fit_step_rates(WORK, observations(noisy, BUDGET))
    reasons = refusals(fit, noisy, WORK, Datasheet(None, None), BUDGET)
    assert len(reasons) == 1 and reasons[0].startswith("residual:")


def test_steps_faster_than_the_datasheet_are_refused() -> None:
    # Times measured on an H100 claimed to come from an L4 (a third of its bandwidth).
    hidden = step_time_model(hidden_profile("H100-80GB", 0.5, 0.8, 1.6, 0.5), SHAPE)
    results = measure(hidden, GridSize.quick)
    fit = fit_step_rates(WORK, observations(results, BUDGET))
    l4 = CATALOG.get("L4")
    reasons = refusals(
        fit, results, WORK, Datasheet(l4.bf16_dense_tflops, l4.hbm_bandwidth_gbps), BUDGET
    )
    assert reasons and all(r.startswith("floor:") for r in reasons)


def test_a_burst_that_took_fewer_steps_than_the_budget_gives_is_refused() -> None:
    hidden = step_time_model(hidden_profile("A10G", 0.4, 0.7, 1.8, 2.0), SHAPE)
    results = measure(hidden, GridSize.quick)
    # The engine's real budget was twice the stated one: two prompts per step.
    wrong = [
        dataclasses.replace(r, num_mixed_steps=2) if r.point.kind is BurstKind.over else r
        for r in results
    ]
    fit = fit_step_rates(WORK, observations(results, BUDGET))
    reasons = refusals(fit, wrong, WORK, Datasheet(None, None), BUDGET)
    assert reasons and reasons[0].startswith("budget:")


def test_too_few_observations_cannot_be_fitted() -> None:
    hidden = step_time_model(hidden_profile("A10G", 0.4, 0.7, 1.8, 2.0), SHAPE)
    results = measure(hidden, GridSize.quick)[:2]
    with pytest.raises(FitError, match="measure more points"):
        fit_step_rates(WORK, observations(results, BUDGET))


def test_a_calibrated_profile_in_the_configmap_wins_over_the_built_in() -> None:
    hidden = step_time_model(hidden_profile("H100-80GB", 0.3, 0.5, 2.0, 1.5), SHAPE)
    results = measure(hidden, GridSize.quick)
    fit = fit_step_rates(WORK, observations(results, BUDGET))
    calibrated = build_profile(
        fit, results, SHAPE, identity(CATALOG.get("H100-80GB"), "H100-80GB"), BUDGET
    )
    merged = merge_catalogs(
        CATALOG, parse_configmap_data({"h100.yaml": profile_yaml(calibrated)}, "ns/gpu-profiles")
    ).get("NVIDIA-H100-80GB-HBM3")
    assert merged.calibration is not None
    model = step_time_model(merged, SHAPE)
    assert "measured by tokenpilot calibrate" in model.describe()
    assert model.decode_step_s(32, 1024) == pytest.approx(hidden.decode_step_s(32, 1024), rel=0.01)
