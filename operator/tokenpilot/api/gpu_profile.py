"""The GPU profile's file format: what a SKU offers (memory, bandwidth, compute, price) and what
was measured on it, as pydantic types. One YAML document each (`policies/gpus/*.yaml` for the
built-ins, ConfigMap keys for a cluster's own); core.profiles parses and merges them.

Units are in the field names (`memoryGib`, `hbmBandwidthGbps`, `stepMs`); a value plausible
only in another unit is refused with the field and the fix.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Self

from pydantic import Field, field_validator, model_validator

from tokenpilot.api.base import ApiModel
from tokenpilot.api.model_shape import MODEL_PRESETS


class Provenance(ApiModel):
    """Where measured figures come from, so a reader can judge and reproduce them."""

    source: str = Field(min_length=1, description="Document or run the figures come from.")
    model: str = Field(description="Model preset measured, e.g. llama-3.1-8b.")
    engine: str = Field(min_length=1, description="Serving engine and version, e.g. vLLM V1.")
    scheduler: str | None = Field(None, description="Scheduling policy, e.g. FCFS.")
    date: str | None = Field(None, description="When it was measured (ISO date) if known.")
    notes: str | None = None

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in MODEL_PRESETS:
            known = ", ".join(sorted(MODEL_PRESETS))
            raise ValueError(f"unknown model preset {value!r}; use one of: {known}")
        return value


class DecodeStep(ApiModel):
    """A pure-decode iteration time at a decode concurrency."""

    num_decode: int = Field(gt=0)
    step_ms: float = Field(gt=0)
    context_tokens: int | None = Field(
        None,
        gt=0,
        description="Context per sequence when known; the physical check assumes 1 otherwise.",
    )

    @field_validator("step_ms")
    @classmethod
    def _milliseconds(cls, value: float) -> float:
        return _check_ms(value)


class MixedStep(ApiModel):
    """Mean iteration time while a burst of prefills runs beside `num_decode` decodes."""

    num_decode: int = Field(ge=0)
    num_prefill: int = Field(gt=0)
    prefill_len: int = Field(gt=0)
    baseline_ms: float = Field(gt=0)
    mixed_ms: float = Field(gt=0)

    @field_validator("baseline_ms", "mixed_ms")
    @classmethod
    def _milliseconds(cls, value: float) -> float:
        return _check_ms(value)

    @property
    def num_prefill_tokens(self) -> int:
        return self.num_prefill * self.prefill_len


class HeatmapCell(ApiModel):
    """Interference of one burst shape; `upperBound` marks cells the study gives as "<x%"."""

    num_prefill: int = Field(gt=0)
    prefill_len: int = Field(gt=0)
    interference_pct: float = Field(ge=0)
    upper_bound: bool = False

    @property
    def num_prefill_tokens(self) -> int:
        return self.num_prefill * self.prefill_len


class Heatmap(ApiModel):
    """Interference by burst shape at one decode concurrency."""

    num_decode: int = Field(gt=0)
    baseline_ms: float = Field(gt=0)
    cells: tuple[HeatmapCell, ...] = Field(min_length=1)

    @field_validator("baseline_ms")
    @classmethod
    def _milliseconds(cls, value: float) -> float:
        return _check_ms(value)


class MeasuredInterference(ApiModel):
    """Step times measured on this SKU, with their provenance, and the prefill threshold."""

    provenance: Provenance
    tensor_parallel_size: int = Field(1, ge=1, description="Tensor parallelism measured at.")
    threshold_prefill_tokens: int = Field(
        gt=0,
        description="Prefill tokens per step the tuner never exceeds (the token budget the "
        "measurements ran at, past which a burst spills into further steps).",
    )
    decode_steps: tuple[DecodeStep, ...] = Field(min_length=1)
    mixed_steps: tuple[MixedStep, ...] = ()
    heatmap: Heatmap | None = None


class ParameterBasis(StrEnum):
    """Where a step-model parameter comes from."""

    fitted = "fitted"  # fitted on the data named beside it
    inherited = "inherited"  # taken from another profile's fit, named beside it, and why
    default = "default"  # a stated default, for want of data


class FittedValue(ApiModel):
    """One step-model parameter, its basis and the data behind it."""

    value: float = Field(gt=0)
    basis: ParameterBasis
    data: str = Field(
        min_length=1,
        description="What it was fitted on (sources, points, engine), or whose fit it inherits "
        "and why.",
    )


class StepModelParameters(ApiModel):
    """The step-time model's parameters for this SKU (see tokenpilot.core.steptime)."""

    engine: str = Field(min_length=1, description="Engine and version the parameters describe.")
    compute_efficiency: FittedValue = Field(
        description="Achieved fraction of the dense datasheet FLOPS, below 1."
    )
    bandwidth_efficiency: FittedValue = Field(
        description="Achieved fraction of the datasheet memory bandwidth, below 1."
    )
    overlap_exponent: FittedValue = Field(
        description="p of the smooth roofline each kernel group is priced at, "
        "(compute**p + memory**p)**(1/p): 1 adds the two (no overlap), larger values approach "
        "the larger of the two (full overlap); at least 1."
    )
    overhead_ms: FittedValue = Field(description="Fixed cost of a step (scheduling, launches).")
    all_reduce_latency_us: FittedValue = Field(
        description="Fixed cost of one tensor-parallel all-reduce."
    )
    fitted_by: str | None = Field(None, description="Tool or procedure that fitted them.")
    date: str | None = Field(None, description="When they were fitted (ISO date).")
    notes: str | None = None

    @field_validator("compute_efficiency", "bandwidth_efficiency")
    @classmethod
    def _below_one(cls, value: FittedValue) -> FittedValue:
        # Exactly 1 only for a device without a datasheet, whose calibrated profile states the
        # achieved rates as its peaks (docs/calibration.md); no kernel beats its datasheet.
        limit_ok = value.value < 1 or (value.value == 1 and value.basis is ParameterBasis.fitted)
        if not limit_ok:
            raise ValueError(
                f"{value.value} is not below 1: an efficiency is achieved over the datasheet "
                f"peak, and no kernel reaches the peak; write the fraction, e.g. 0.55"
            )
        return value

    @field_validator("overlap_exponent")
    @classmethod
    def _at_least_one(cls, value: FittedValue) -> FittedValue:
        if value.value < 1:
            raise ValueError(
                f"{value.value} is below 1: a kernel group cannot take longer than its compute "
                f"and memory times added (p = 1); write 1 for no overlap, or the fitted value, "
                f"e.g. 1.6"
            )
        return value


class FittedRate(ApiModel):
    """One fitted parameter of a calibration, in its unit, with one standard error."""

    name: str = Field(min_length=1)
    value: float
    unit: str = Field(min_length=1)
    relative_uncertainty: float | None = Field(
        None, description="One standard error over the value; null when the data cannot pin it."
    )


class HeldOutPoint(ApiModel):
    """A grid point left out of the fit: what it measured and what the fit predicts."""

    what: str = Field(min_length=1)
    measured_ms: float = Field(gt=0)
    predicted_ms: float = Field(gt=0)


class ThresholdAt(ApiModel):
    """The most prefill tokens one step carries beside the reference decodes within an ITL."""

    itl_ms: float = Field(gt=0)
    prefill_tokens: int = Field(ge=0)


class CalibrationRecord(ApiModel):
    """How a profile's stepModel was measured (`tokenpilot calibrate`, docs/calibration.md)."""

    date: str = Field(min_length=1, description="When it was measured (ISO 8601, UTC).")
    endpoint: str = Field(min_length=1)
    engine: str = Field(min_length=1, description="Engine and version the endpoint reported.")
    model: str = Field(min_length=1, description="Served model name.")
    model_shape: str = Field(min_length=1, description="Shape preset or file the fit used.")
    grid: str = Field(min_length=1)
    budget_tokens: int = Field(gt=0, description="max_num_batched_tokens measured at.")
    num_points: int = Field(gt=0)
    parameters: tuple[FittedRate, ...] = ()
    max_held_out_error_pct: float = Field(ge=0)
    held_out: tuple[HeldOutPoint, ...] = ()
    reference_decodes: int = Field(ge=0)
    reference_context_tokens: int = Field(ge=0)
    thresholds: tuple[ThresholdAt, ...] = ()
    spill_tokens: int = Field(
        ge=0, description="Prefill tokens past which a burst spills into another step."
    )
    duration_s: float = Field(ge=0)


class GPUProfile(ApiModel):
    """One GPU SKU: identity, datasheet figures, price, and measured interference if any."""

    name: str = Field(min_length=1, description="Canonical SKU name, e.g. H100-80GB.")
    aliases: tuple[str, ...] = ()
    gpu_product_labels: tuple[str, ...] = Field(
        min_length=1, description="nvidia.com/gpu.product values (GPU feature discovery)."
    )
    architecture: str = Field(min_length=1)
    memory_gib: float = Field(gt=0, description="Device memory as the driver reports it, GiB.")
    hbm_bandwidth_gbps: float = Field(gt=0, description="Peak memory bandwidth, GB/s.")
    bf16_dense_tflops: float = Field(gt=0, description="Dense BF16 (or FP16) tensor TFLOPS.")
    interconnect_gbps: float | None = Field(
        None,
        gt=0,
        description="GPU-to-GPU bandwidth per direction, GB/s (NVLink, else PCIe); tensor "
        "parallelism's all-reduces cross it. Unset: PCIe Gen4 x16 (32 GB/s) is assumed.",
    )
    hourly_cost_usd: float = Field(ge=0, description="On-demand price per GPU-hour, USD.")
    hourly_cost_source: str = Field(min_length=1)
    datasheet_source: str = Field(min_length=1)
    step_model: StepModelParameters | None = None
    measured: MeasuredInterference | None = None
    calibration: CalibrationRecord | None = None
    notes: str | None = None

    @field_validator("memory_gib")
    @classmethod
    def _gib(cls, value: float) -> float:
        if value > 1024:
            raise ValueError(
                f"{value} GiB is implausible for one GPU; the unit is GiB (write 80, not 81920)"
            )
        return value

    @field_validator("hbm_bandwidth_gbps")
    @classmethod
    def _gbps(cls, value: float) -> float:
        if value < 50:
            raise ValueError(
                f"{value} GB/s is implausibly low; the unit is GB/s, so a figure in TB/s such "
                f"as 3.35 must be written 3350"
            )
        return value

    @field_validator("bf16_dense_tflops")
    @classmethod
    def _tflops(cls, value: float) -> float:
        if value > 20_000:
            raise ValueError(
                f"{value} TFLOPS is implausible; the unit is TFLOPS (write 989, not 989000)"
            )
        return value

    @model_validator(mode="after")
    def _labels_look_like_gfd(self) -> Self:
        for label in self.gpu_product_labels:
            if " " in label:
                raise ValueError(
                    f"gpuProductLabels: {label!r} contains a space; GPU feature discovery "
                    f"writes dashes, e.g. {label.replace(' ', '-')!r}"
                )
        return self

    @property
    def is_measured(self) -> bool:
        return self.measured is not None

    @property
    def keys(self) -> tuple[str, ...]:
        """Every spelling that identifies this SKU, normalised for lookup."""
        return tuple(
            dict.fromkeys(
                normalise_key(k) for k in (self.name, *self.aliases, *self.gpu_product_labels)
            )
        )


def _check_ms(value: float) -> float:
    if value < 0.5:
        raise ValueError(
            f"{value} ms is implausibly short for a model step; the unit is milliseconds "
            f"(write 8.4, not 0.0084)"
        )
    return value


def normalise_key(text: str) -> str:
    """Case, spaces and underscores do not distinguish SKUs: `h100 80gb` finds H100-80GB."""
    return re.sub(r"[\s_]+", "-", text.strip()).lower()
