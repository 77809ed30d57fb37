"""The step-time model: how long one engine iteration takes on a GPU for a model shape.

One iteration reads every weight once and the KV cache of every scheduled sequence, and does
2 x parameters FLOPs per token it processes. So, per GPU at tensor parallelism `tp`, for a step
of n = decode + prefill tokens:

    memory_s  = (weight bytes + KV bytes per token x KV tokens read) / effective bandwidth
    compute_s = compute seconds per token x n
    excess_s  = excess of a full step x (n / threshold) ** k
    step_s    = overhead + max(memory_s, compute_s) + excess_s

The roofline (the max) explains why a small prefill rides free beside decode: its compute hides
under the memory-bound decode read. The excess is what the interference study measured on top:
a step that fills the threshold (the budget the study ran at) costs several times the decode
baseline, while a step at half of it costs well under twice. A steep power of n / threshold
reproduces that step shape and stays continuous and monotone, so no budget just under the
threshold is cheaper than its neighbours; vLLM never schedules more than the budget per step,
so the full step at the threshold is the one the study's mixed time prices.

Fitting (for a profile with measurements; every figure comes from the profile's YAML):
  - effective bandwidth: a least-squares line through the pure-decode steps; its intercept is
    the weight read, its slope the per-sequence KV read at the study's (implied) context;
  - compute seconds per token: from the heatmap's cells under the threshold where prefill no
    longer hides (>= 20 % interference), else the datasheet FLOPS at the efficiency fitted on
    H100; never above what a full step of the measured rows allows;
  - excess of a full step: each measured row's mixed time less the roofline of one step of
    threshold tokens (rows with bursts up to twice the threshold), linear in the decode count
    between rows and flat beyond them;
  - exponent k: least squares in log space through the heatmap's measured cells under the
    threshold (their residual over the roofline against the full-step excess), else the H100 fit.
A profile without measurements uses the datasheet with the efficiencies fitted on the measured
GPUs, a full-step excess of a fixed fraction of the roofline compute of a threshold step and the
H100 exponent; its `measured` is False so callers can say the figure is estimated. For another
model than the one measured, bandwidth and efficiency carry over and the compute terms scale
with the parameters per GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tokenpilot.api.model_shape import ModelShape, model_preset
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.profiles import GPUProfile, MeasuredInterference

# Scheduler and launch cost of a step; the study saw 0.1-0.5 ms of scheduling per step.
OVERHEAD_S = 0.0003
# No fit may claim more than this fraction of the datasheet bandwidth.
MAX_BANDWIDTH_EFFICIENCY = 0.95
# Median over the measured GPUs (tests/unit/test_steptime.py re-derives it).
DEFAULT_BANDWIDTH_EFFICIENCY = 0.7
# Effective prefill FLOP rate over the dense datasheet figure, fitted on the H100 heatmap. It is
# above 1 because the study's mixed times are below what the datasheet allows (docs/tuning.md).
DEFAULT_PREFILL_EFFICIENCY = 6.5
# Excess of a full threshold step over its roofline, as a fraction of the roofline compute of
# that step: the median over the measured GPUs of their largest fitted excess.
DEFAULT_EXCESS_FRACTION = 1.4
# Exponent of the excess, fitted on the H100 heatmap (the only measured one).
DEFAULT_EXCESS_EXPONENT = 2.9
# The fitted exponent stays in this range: below it the step would be a slope, above a cliff.
_MIN_EXPONENT, _MAX_EXPONENT = 1.5, 8.0
_EXPONENT_STEP = 0.05
# Candidate compute rates tried, evenly from 0 to the most the measured rows allow.
_COMPUTE_GRID = 40
# Rows with bursts above this many thresholds span many steps and do not price one step.
_FIT_MAX_THRESHOLDS = 2


@dataclass(frozen=True, slots=True)
class StepTimeModel:
    """Prices one iteration; built by `step_time_model`, cheap to call millions of times."""

    gpu: str
    tensor_parallel_size: int
    measured: bool
    overhead_s: float
    weight_read_s: float
    kv_read_s_per_token: float
    compute_s_per_token: float
    threshold_tokens: int
    excess_num_decode: tuple[float, ...]
    excess_s: tuple[float, ...]
    excess_exponent: float
    bandwidth_efficiency: float
    prefill_efficiency: float
    calibration_context_tokens: int | None

    def iteration_s(
        self, num_decode_tokens: int, num_prefill_tokens: int, num_kv_tokens_read: int
    ) -> float:
        """Seconds for one step with these tokens; `num_kv_tokens_read` sums context over
        the scheduled sequences."""
        num_tokens = num_decode_tokens + num_prefill_tokens
        memory_s = self.weight_read_s + self.kv_read_s_per_token * num_kv_tokens_read
        compute_s = self.compute_s_per_token * num_tokens
        step_s = self.overhead_s + (memory_s if memory_s > compute_s else compute_s)
        fill = num_tokens / self.threshold_tokens
        return step_s + self.jump_at(num_decode_tokens) * math.pow(fill, self.excess_exponent)

    def jump_at(self, num_decode_tokens: float) -> float:
        """The excess seconds of a step that fills the threshold, at this decode count."""
        return _interpolate(self.excess_num_decode, self.excess_s, num_decode_tokens)

    def decode_step_s(self, num_decode: int, context_tokens: int) -> float:
        """A pure-decode step: `num_decode` sequences each `context_tokens` long."""
        return self.iteration_s(num_decode, 0, num_decode * context_tokens)

    def describe(self) -> str:
        """The model's figures in words, for plans and reasons."""
        basis = "fitted to measurements" if self.measured else "estimated from the datasheet"
        excess = ", ".join(f"{j * 1e3:.0f}" for j in self.excess_s)
        return (
            f"{self.gpu} step model ({basis}): weights read in {self.weight_read_s * 1e3:.1f} ms "
            f"at {self.bandwidth_efficiency:.0%} of peak bandwidth, prefill "
            f"{self.compute_s_per_token * 1e6:.2f} us/token, a step filling the "
            f"{self.threshold_tokens:,}-token threshold costs {excess} ms more, growing as "
            f"(tokens / threshold)^{self.excess_exponent:.1f}"
        )


def step_time_model(
    profile: GPUProfile, shape: ModelShape, tensor_parallel_size: int = 1
) -> StepTimeModel:
    """The step-time model of `shape` on `profile` at this tensor parallelism."""
    tp = tensor_parallel_size
    if tp < 1:
        raise InvalidSpec(f"tensorParallelSize must be at least 1, got {tp}")
    if shape.num_attention_heads % tp != 0:
        raise InvalidSpec(
            f"tensorParallelSize {tp} must divide numAttentionHeads "
            f"({shape.num_attention_heads}); choose a divisor such as 1, 2, 4 or 8"
        )
    params_gpu = shape.num_parameters / tp
    weight_bytes_gpu = shape.weight_bytes / tp
    # KV heads split across ranks until each rank holds one; beyond that they are replicated.
    kv_bytes_token_gpu = shape.kv_bytes_per_token / min(tp, shape.num_kv_heads)
    peak_bytes_per_s = profile.hbm_bandwidth_gbps * 1e9
    peak_flops = profile.bf16_dense_tflops * 1e12

    if profile.measured is None:
        bytes_per_s = peak_bytes_per_s * DEFAULT_BANDWIDTH_EFFICIENCY
        compute_s_per_token = 2.0 * params_gpu / (peak_flops * DEFAULT_PREFILL_EFFICIENCY)
        threshold = _scaled_threshold(_estimated_threshold(profile), 1.0)
        return StepTimeModel(
            gpu=profile.name,
            tensor_parallel_size=tp,
            measured=False,
            overhead_s=OVERHEAD_S,
            weight_read_s=weight_bytes_gpu / bytes_per_s,
            kv_read_s_per_token=kv_bytes_token_gpu / bytes_per_s,
            compute_s_per_token=compute_s_per_token,
            threshold_tokens=threshold,
            excess_num_decode=(0.0,),
            excess_s=(DEFAULT_EXCESS_FRACTION * threshold * compute_s_per_token,),
            excess_exponent=DEFAULT_EXCESS_EXPONENT,
            bandwidth_efficiency=DEFAULT_BANDWIDTH_EFFICIENCY,
            prefill_efficiency=DEFAULT_PREFILL_EFFICIENCY,
            calibration_context_tokens=None,
        )

    fit = _fit(profile, profile.measured)
    scale = params_gpu / fit.params
    return StepTimeModel(
        gpu=profile.name,
        tensor_parallel_size=tp,
        measured=True,
        overhead_s=OVERHEAD_S,
        weight_read_s=weight_bytes_gpu / fit.bytes_per_s,
        kv_read_s_per_token=kv_bytes_token_gpu / fit.bytes_per_s,
        compute_s_per_token=fit.compute_s_per_token * scale,
        threshold_tokens=_scaled_threshold(profile.measured.threshold_prefill_tokens, scale),
        excess_num_decode=fit.excess_num_decode,
        excess_s=tuple(j * scale for j in fit.excess_s),
        excess_exponent=fit.excess_exponent,
        bandwidth_efficiency=fit.bytes_per_s / peak_bytes_per_s,
        prefill_efficiency=2.0 * fit.params / (fit.compute_s_per_token * peak_flops),
        calibration_context_tokens=round(fit.context_tokens),
    )


def _estimated_threshold(profile: GPUProfile) -> int:
    # The study saw two classes: ~8K tokens on the ~1 PFLOPS Hopper parts, ~4K on everything
    # from 130 to 400 TFLOPS. Nothing measured supports a smaller figure.
    return 8192 if profile.bf16_dense_tflops >= 900 else 4096


def _scaled_threshold(threshold: int, params_scale: float) -> int:
    # A model with more parameters per GPU saturates compute with fewer tokens.
    scaled = int(threshold / params_scale) // 256 * 256
    return max(256, scaled)


@dataclass(frozen=True, slots=True)
class _Fit:
    params: float
    bytes_per_s: float
    context_tokens: float
    compute_s_per_token: float
    excess_num_decode: tuple[float, ...]
    excess_s: tuple[float, ...]
    excess_exponent: float


def _fit(profile: GPUProfile, measured: MeasuredInterference) -> _Fit:
    study = model_preset(measured.provenance.model)
    weight_bytes = study.weight_bytes
    threshold = measured.threshold_prefill_tokens

    # Pure-decode steps: step = a + b x decodes; a is overhead plus the weight read.
    points = [(float(s.num_decode), s.step_ms / 1e3) for s in measured.decode_steps]
    a_min = OVERHEAD_S + weight_bytes / (
        profile.hbm_bandwidth_gbps * 1e9 * MAX_BANDWIDTH_EFFICIENCY
    )
    a, b = _line(points)
    if a < a_min:
        a = a_min
        b = sum(d * (t - a) for d, t in points) / sum(d * d for d, _ in points)
    b = max(b, 0.0)
    bytes_per_s = weight_bytes / (a - OVERHEAD_S)
    context_tokens = b * bytes_per_s / study.kv_bytes_per_token

    def memory_s(num_decode: float) -> float:
        return a - OVERHEAD_S + b * num_decode

    # A row's burst overflows the threshold, so the engine runs it as full steps of the
    # threshold (the budget the study ran at); that step is what its mixed time prices.
    rows = [
        (float(r.num_decode), r.mixed_ms / 1e3)
        for r in measured.mixed_steps
        if r.num_decode + r.num_prefill_tokens > threshold
        and r.num_prefill_tokens <= _FIT_MAX_THRESHOLDS * threshold
    ]
    max_compute = min(((t - OVERHEAD_S) / threshold for _, t in rows), default=math.inf)
    datasheet = 2.0 * study.num_parameters / (profile.bf16_dense_tflops * 1e12)
    compute = min(max_compute, datasheet / DEFAULT_PREFILL_EFFICIENCY)
    exponent = DEFAULT_EXCESS_EXPONENT
    hm = measured.heatmap
    # Each measured heatmap cell under the threshold is one step at the heatmap's decode count.
    cells = (
        []
        if hm is None
        else [
            (hm.num_decode, hm.num_decode + c.num_prefill_tokens, 1 + c.interference_pct / 100)
            for c in hm.cells
            if not c.upper_bound and hm.num_decode + c.num_prefill_tokens <= threshold
        ]
    )
    if rows and cells and max_compute < math.inf:
        compute, exponent = _fit_compute_and_exponent(memory_s, threshold, rows, cells, max_compute)

    xs, ys = _excess_table(memory_s, threshold, rows, compute)
    if not xs:
        xs, ys = (0.0,), (DEFAULT_EXCESS_FRACTION * threshold * compute,)
    return _Fit(
        params=float(study.num_parameters),
        bytes_per_s=bytes_per_s,
        context_tokens=context_tokens,
        compute_s_per_token=compute,
        excess_num_decode=xs,
        excess_s=ys,
        excess_exponent=exponent,
    )


def _excess_table(
    memory_s: Callable[[float], float],
    threshold: int,
    rows: list[tuple[float, float]],
    compute_s_per_token: float,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Each row's full-step time over the roofline of that step, averaged per decode count."""
    by_decode: dict[float, list[float]] = {}
    for d, mixed_s in rows:
        roofline_s = OVERHEAD_S + max(memory_s(d), compute_s_per_token * threshold)
        by_decode.setdefault(d, []).append(max(0.0, mixed_s - roofline_s))
    xs = tuple(sorted(by_decode))
    return xs, tuple(sum(by_decode[x]) / len(by_decode[x]) for x in xs)


def _fit_compute_and_exponent(
    memory_s: Callable[[float], float],
    threshold: int,
    rows: list[tuple[float, float]],
    cells: list[tuple[int, int, float]],
    max_compute: float,
) -> tuple[float, float]:
    """Compute seconds per token and exponent k minimising the squared seconds between the
    model and the heatmap's cells (each a step time relative to the model's decode step),
    the full-step excess pinned to the rows for each candidate; a grid, as the error surface
    is flat along the compute rate and a gradient would wander."""
    best = (math.inf, 0.0, DEFAULT_EXCESS_EXPONENT)
    num_k = round((_MAX_EXPONENT - _MIN_EXPONENT) / _EXPONENT_STEP)
    for i in range(_COMPUTE_GRID + 1):
        compute = max_compute * i / _COMPUTE_GRID
        xs, ys = _excess_table(memory_s, threshold, rows, compute)
        points = []
        for d, num_tokens, ratio in cells:
            memory = memory_s(d)
            base_s = OVERHEAD_S + max(memory, compute * d)
            roofline_s = OVERHEAD_S + max(memory, compute * num_tokens)
            points.append(
                (num_tokens / threshold, base_s * ratio - roofline_s, _interpolate(xs, ys, d))
            )
        for j in range(num_k + 1):
            k = _MIN_EXPONENT + _EXPONENT_STEP * j
            err = sum((full_s * fill**k - residual_s) ** 2 for fill, residual_s, full_s in points)
            if err < best[0]:
                best = (err, compute, k)
    return best[1], best[2]


def _interpolate(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear through (xs, ys), flat outside them."""
    if x <= xs[0]:
        return ys[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            return ys[i - 1] + (x - xs[i - 1]) / (xs[i] - xs[i - 1]) * (ys[i] - ys[i - 1])
    return ys[-1]


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares intercept and slope; a single point gives a flat line."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var_x = sum((x - mean_x) ** 2 for x, _ in points)
    if var_x == 0:
        return mean_y, 0.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var_x
    return mean_y - slope * mean_x, slope
