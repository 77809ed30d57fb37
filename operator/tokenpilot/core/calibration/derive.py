"""From a fit to a GPU profile: thresholds, refusals, and the profile with its provenance.

Refusals (each with its reason; no profile is written):
  - residual: a point held out of the fit is predicted worse than `max_error` (25 % unless
    told), so the model does not describe this engine (noise, a loaded machine, a burst that
    met something else);
  - floor: where the SKU's datasheet peaks are known, a measured step faster than 100 % of
    them, or a fitted rate above the peak (efficiency of 1 or more); without a datasheet there
    is no floor to check, and the profile states the achieved rates as its peaks;
  - budget: a burst over the budget took a different number of steps than the budget the
    engine is said to run gives (each such burst fills exactly four steps at the stated budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenpilot.api.gpu_profile import (
    CalibrationRecord,
    DecodeStep,
    FittedRate,
    FittedValue,
    GPUProfile,
    HeldOutPoint,
    MeasuredInterference,
    MixedStep,
    ParameterBasis,
    Provenance,
    StepModelParameters,
    ThresholdAt,
)
from tokenpilot.api.model_shape import MODEL_PRESETS, ModelShape
from tokenpilot.core.calibration.fit import Observation, StepFit
from tokenpilot.core.calibration.grid import GridPoint, Step, burst_steps
from tokenpilot.core.roofline import PrefillChunk, StepWork, step_floor_s
from tokenpilot.core.steptime import DEFAULT_STEP_MODEL, StepTimeModel, step_time_model

ITL_TARGETS_MS = (25.0, 50.0, 100.0)
DEFAULT_MAX_ERROR = 0.25
MAX_THRESHOLD_TOKENS = 1 << 20


@dataclass(frozen=True, slots=True)
class PointResult:
    """What one grid point measured: the decode step before the burst, the mean of the steps
    that carried it, how many steps did, and the decodes' context when it went out."""

    point: GridPoint
    baseline_s: float
    mixed_s: float
    num_mixed_steps: int
    decode_context_tokens: int


@dataclass(frozen=True, slots=True)
class Datasheet:
    """The SKU's peaks when known (a built-in or given profile), else None for each."""

    peak_tflops: float | None
    bandwidth_gbps: float | None


def threshold_tokens(
    model: StepTimeModel, num_decode: int, context_tokens: int, itl_s: float
) -> int:
    """The most prefill tokens one step carries beside `num_decode` decodes of
    `context_tokens` each and still takes at most `itl_s` (0 if the decodes alone take more)."""

    def step_s(tokens: int) -> float:
        chunks = (PrefillChunk(tokens),) if tokens else ()
        return model.iteration_s(num_decode, num_decode * context_tokens, chunks)

    if step_s(0) > itl_s:
        return 0
    lo, hi = 0, 1
    while hi < MAX_THRESHOLD_TOKENS and step_s(hi) <= itl_s:
        lo, hi = hi, hi * 2
    if hi >= MAX_THRESHOLD_TOKENS and step_s(hi) <= itl_s:
        return MAX_THRESHOLD_TOKENS
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if step_s(mid) <= itl_s:
            lo = mid
        else:
            hi = mid
    return lo


def refusals(
    fit: StepFit,
    results: Sequence[PointResult],
    work: StepWork,
    datasheet: Datasheet,
    budget_tokens: int,
    max_error: float = DEFAULT_MAX_ERROR,
) -> list[str]:
    """Every reason not to write the profile; empty when it may be written."""
    reasons = []
    worst = max(fit.held_out, key=lambda r: abs(r.error), default=None)
    if worst is not None and abs(worst.error) > max_error:
        reasons.append(
            f"residual: a held-out point is predicted {worst.error:+.0%} off what it measured "
            f"({worst.what}: measured {worst.measured_s * 1e3:.2f} ms, predicted "
            f"{worst.predicted_s * 1e3:.2f} ms), over the {max_error:.0%} allowed; measure "
            f"again on an idle engine and machine"
        )
    for result in results:
        point = result.point
        if point.kind.value != "over":
            continue
        expected = point.num_prefill
        if abs(result.num_mixed_steps - expected) > max(1, expected // 4):
            reasons.append(
                f"budget: {point.label()} took {result.num_mixed_steps} steps, not the "
                f"{expected} a budget of {budget_tokens} tokens gives; pass the engine's "
                f"--max-num-batched-tokens (its token budget)"
            )
            break
    if datasheet.peak_tflops is not None and datasheet.bandwidth_gbps is not None:
        reasons.extend(_under_floor(fit, results, work, datasheet, budget_tokens))
    return reasons


def _under_floor(
    fit: StepFit,
    results: Sequence[PointResult],
    work: StepWork,
    datasheet: Datasheet,
    budget_tokens: int,
) -> list[str]:
    assert datasheet.peak_tflops is not None and datasheet.bandwidth_gbps is not None
    reasons = []
    where = f"({datasheet.peak_tflops:g} TFLOPS, {datasheet.bandwidth_gbps:g} GB/s)"
    for result in results:
        point = result.point
        floor = step_floor_s(
            work,
            datasheet.peak_tflops,
            datasheet.bandwidth_gbps,
            point.num_decode,
            point.num_decode * result.decode_context_tokens,
        )
        if result.baseline_s < floor:
            reasons.append(
                f"floor: {point.num_decode} decodes at {result.decode_context_tokens} ctx took "
                f"{result.baseline_s * 1e3:.2f} ms, under the datasheet floor of "
                f"{floor * 1e3:.2f} ms {where}; is --gpu-name the GPU the engine runs on?"
            )
            break
    rates = fit.rates
    for name, achieved, peak in (
        ("compute", 1.0 / rates.s_per_flop / 1e12, datasheet.peak_tflops),
        ("bandwidth", 1.0 / rates.s_per_byte / 1e9, datasheet.bandwidth_gbps),
    ):
        if achieved >= peak:
            unit = "TFLOPS" if name == "compute" else "GB/s"
            reasons.append(
                f"floor: the fitted {name} rate of {achieved:,.0f} {unit} is at or over the "
                f"datasheet's {peak:g} {unit}; is --gpu-name the GPU the engine runs on?"
            )
    return reasons


@dataclass(frozen=True, slots=True)
class Identity:
    """What the profile is for and where its figures came from."""

    gpu_name: str
    base: GPUProfile | None  # the catalog's profile of that SKU, whose datasheet is kept
    memory_gib: float | None
    endpoint: str
    engine: str
    model: str
    model_shape: str
    grid: str
    date: str
    duration_s: float


def build_profile(
    fit: StepFit,
    results: Sequence[PointResult],
    shape: ModelShape,
    identity: Identity,
    budget_tokens: int,
) -> GPUProfile:
    """The calibrated profile: the base profile's datasheet (or the achieved rates as peaks),
    the fitted stepModel, the calibration record and, for a model preset, the measurements."""
    rates = fit.rates
    base = identity.base
    achieved_tflops = 1.0 / rates.s_per_flop / 1e12
    achieved_gbps = 1.0 / rates.s_per_byte / 1e9
    if base is not None:
        peak_tflops, bandwidth_gbps = base.bf16_dense_tflops, base.hbm_bandwidth_gbps
    else:
        peak_tflops, bandwidth_gbps = achieved_tflops, achieved_gbps
    n_fit, n_held = len(fit.fitted), len(fit.held_out)
    data = (
        f"tokenpilot calibrate, {identity.grid} grid, {n_fit} observations fitted, "
        f"{n_held} held out, against {identity.endpoint} ({identity.engine}, "
        f"{identity.model}) on {identity.date}"
    )
    u_overhead, u_byte, u_flop, u_p = fit.relative_uncertainty
    step_model = StepModelParameters(
        engine=identity.engine,
        compute_efficiency=FittedValue(
            value=round(min(achieved_tflops / peak_tflops, 1.0), 6),
            basis=ParameterBasis.fitted,
            data=data,
        ),
        bandwidth_efficiency=FittedValue(
            value=round(min(achieved_gbps / bandwidth_gbps, 1.0), 6),
            basis=ParameterBasis.fitted,
            data=data,
        ),
        overlap_exponent=FittedValue(
            value=round(rates.overlap_exponent, 4), basis=ParameterBasis.fitted, data=data
        ),
        overhead_ms=FittedValue(
            value=round(rates.overhead_s * 1e3, 6), basis=ParameterBasis.fitted, data=data
        ),
        all_reduce_latency_us=DEFAULT_STEP_MODEL.all_reduce_latency_us,
        fitted_by="tokenpilot calibrate (docs/calibration.md)",
        date=identity.date,
        notes=None
        if base is not None
        else "no datasheet for this device: its peaks are the achieved rates, so both "
        "efficiencies are 1 and no physical floor was checked",
    )
    p = rates.overlap_exponent
    parameters = (
        FittedRate(
            name="overhead",
            value=rates.overhead_s * 1e3,
            unit="ms",
            relative_uncertainty=_u(u_overhead),
        ),
        FittedRate(
            name="weight read",
            value=rates.s_per_byte * shape.weight_bytes * 1e3,
            unit="ms per step",
            relative_uncertainty=_u(u_byte),
        ),
        FittedRate(
            name="KV read",
            value=rates.s_per_byte * shape.kv_bytes_per_token * 1e6,
            unit="us per token of context",
            relative_uncertainty=_u(u_byte),
        ),
        FittedRate(
            name="prefill compute",
            value=rates.s_per_flop * 2.0 * shape.num_parameters * 1e6,
            unit="us per prefill token",
            relative_uncertainty=_u(u_flop),
        ),
        FittedRate(
            name="compute rate",
            value=achieved_tflops,
            unit="TFLOPS",
            relative_uncertainty=_u(u_flop),
        ),
        FittedRate(
            name="memory rate", value=achieved_gbps, unit="GB/s", relative_uncertainty=_u(u_byte)
        ),
        FittedRate(
            name="overlap exponent",
            value=p,
            unit="p",
            relative_uncertainty=_u(u_p * (p - 1.0) / p),
        ),
    )
    profile = GPUProfile(
        name=identity.gpu_name,
        aliases=base.aliases if base is not None else (),
        gpu_product_labels=base.gpu_product_labels if base is not None else (identity.gpu_name,),
        architecture=base.architecture if base is not None else "unknown",
        memory_gib=base.memory_gib if base is not None else (identity.memory_gib or 1.0),
        hbm_bandwidth_gbps=round(bandwidth_gbps, 3),
        bf16_dense_tflops=round(peak_tflops, 6),
        interconnect_gbps=base.interconnect_gbps if base is not None else None,
        hourly_cost_usd=base.hourly_cost_usd if base is not None else 0.0,
        hourly_cost_source=base.hourly_cost_source
        if base is not None
        else "not priced: set hourlyCostUsd to your price",
        datasheet_source=base.datasheet_source
        if base is not None
        else "no datasheet: peaks are the achieved rates measured by tokenpilot calibrate",
        step_model=step_model,
    )
    model = step_time_model(profile, shape)
    reference_decodes = max(r.point.num_decode for r in results)
    reference_context = sorted(r.point.context_tokens for r in results)[len(results) // 2]
    record = CalibrationRecord(
        date=identity.date,
        endpoint=identity.endpoint,
        engine=identity.engine,
        model=identity.model,
        model_shape=identity.model_shape,
        grid=identity.grid,
        budget_tokens=budget_tokens,
        num_points=len(results),
        parameters=parameters,
        max_held_out_error_pct=round(100 * fit.max_held_out_error(), 2),
        held_out=tuple(
            HeldOutPoint(
                what=r.what,
                measured_ms=round(r.measured_s * 1e3, 4),
                predicted_ms=round(r.predicted_s * 1e3, 4),
            )
            for r in fit.held_out
        ),
        reference_decodes=reference_decodes,
        reference_context_tokens=reference_context,
        thresholds=tuple(
            ThresholdAt(
                itl_ms=target,
                prefill_tokens=threshold_tokens(
                    model, reference_decodes, reference_context, target / 1e3
                ),
            )
            for target in ITL_TARGETS_MS
        ),
        spill_tokens=budget_tokens - reference_decodes,
        duration_s=round(identity.duration_s, 1),
    )
    measured = None
    if identity.model_shape in MODEL_PRESETS:
        measured = MeasuredInterference(
            provenance=Provenance(
                source=f"tokenpilot calibrate against {identity.endpoint}",
                model=identity.model_shape,
                engine=identity.engine,
                scheduler="FCFS",
                date=identity.date,
            ),
            threshold_prefill_tokens=budget_tokens,
            decode_steps=tuple(
                DecodeStep(
                    num_decode=r.point.num_decode,
                    step_ms=max(round(r.baseline_s * 1e3, 4), 0.5),
                    context_tokens=r.decode_context_tokens,
                )
                for r in results
            ),
            mixed_steps=tuple(
                MixedStep(
                    num_decode=r.point.num_decode,
                    num_prefill=r.point.num_prefill,
                    prefill_len=r.point.prefill_len,
                    baseline_ms=max(round(r.baseline_s * 1e3, 4), 0.5),
                    mixed_ms=max(round(r.mixed_s * 1e3, 4), 0.5),
                )
                for r in results
                if r.point.kind.value == "under"
            ),
        )
    return profile.model_copy(update={"calibration": record, "measured": measured})


def _u(value: float) -> float | None:
    return round(value, 4) if value < 1e6 else None


def observations(results: Sequence[PointResult], budget_tokens: int) -> list[Observation]:
    """Two observations per point: its decode step, and the mean of the burst's steps."""
    out = []
    for r in results:
        point = r.point
        context = point.num_decode * r.decode_context_tokens
        out.append(
            Observation(
                steps=(Step(point.num_decode, context),),
                measured_s=r.baseline_s,
                held_out=point.held_out,
                what=f"{point.num_decode} decodes x {r.decode_context_tokens} ctx",
            )
        )
        out.append(
            Observation(
                steps=tuple(
                    burst_steps(
                        point.num_decode,
                        context,
                        [point.prefill_len] * point.num_prefill,
                        budget_tokens,
                    )
                ),
                measured_s=r.mixed_s,
                held_out=point.held_out,
                what=f"{point.num_decode} decodes x {r.decode_context_tokens} ctx + "
                f"{point.num_prefill} x {point.prefill_len} prefill",
            )
        )
    return out
