"""The step-time model: how long one engine iteration takes on a GPU for a model shape.

One iteration reads every weight once and the KV cache of every scheduled sequence, and does
2 x parameters FLOPs per token it processes. So, per GPU at tensor parallelism `tp`:

    memory_s  = (weight bytes + KV bytes per token x KV tokens read) / effective bandwidth
    compute_s = compute seconds per token x (decode tokens + prefill tokens)
    step_s    = overhead + max(memory_s, compute_s)            (the roofline)
              + jump(decode tokens)  if the step's tokens exceed the threshold

The roofline explains why prefill rides free beside decode while its compute hides under the
memory-bound decode read. The jump is what the interference study measured on top of that: once
a step carries more tokens than the GPU's threshold, decode steps cost several times the
baseline, a step and not a slope.

Fitting (for a profile with measurements; every figure comes from the profile's YAML):
  - effective bandwidth: a least-squares line through the pure-decode steps; its intercept is
    the weight read, its slope the per-sequence KV read at the study's (implied) context;
  - compute seconds per token: from the heatmap's below-threshold cells where prefill no longer
    hides (>= 20 % interference), else the datasheet FLOPS at the efficiency fitted on H100;
    never above what the over-threshold rows allow;
  - jump: the residual of each over-threshold row (bursts up to twice the threshold), linear in
    the decode count between rows and flat beyond them.
A profile without measurements uses the datasheet with the efficiencies fitted on the measured
GPUs; its `measured` is False so callers can say the figure is estimated. For another model than
the one measured, bandwidth and efficiency carry over and the compute terms scale with the
parameters per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from tokenpilot.api.model_shape import ModelShape, model_preset
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.profiles import GPUProfile, MeasuredInterference

# Scheduler and launch cost of a step; the study saw 0.1-0.5 ms of scheduling per step.
OVERHEAD_S = 0.0003
# No fit may claim more than this fraction of the datasheet bandwidth.
MAX_BANDWIDTH_EFFICIENCY = 0.95
# Median over the measured GPUs (tests/unit/test_steptime_golden.py re-derives it).
DEFAULT_BANDWIDTH_EFFICIENCY = 0.7
# Effective prefill FLOP rate over the dense datasheet figure, fitted on the H100 heatmap. It is
# above 1 because the study's "mixed" time is a mean over the burst's steps, not one step.
DEFAULT_PREFILL_EFFICIENCY = 4.8
# Jump at the threshold as a fraction of the compute time of a threshold-sized step.
DEFAULT_JUMP_FRACTION = 0.6
# Interference at or above this marks a step as "hidden" no longer (for the compute fit).
_COMPUTE_BOUND_PCT = 20.0
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
    jump_num_decode: tuple[float, ...]
    jump_s: tuple[float, ...]
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
        if num_tokens > self.threshold_tokens:
            step_s += self.jump_at(num_decode_tokens)
        return step_s

    def jump_at(self, num_decode_tokens: float) -> float:
        """The extra seconds of an over-threshold step at this decode count."""
        xs, ys = self.jump_num_decode, self.jump_s
        if num_decode_tokens <= xs[0]:
            return ys[0]
        for i in range(1, len(xs)):
            if num_decode_tokens <= xs[i]:
                frac = (num_decode_tokens - xs[i - 1]) / (xs[i] - xs[i - 1])
                return ys[i - 1] + frac * (ys[i] - ys[i - 1])
        return ys[-1]

    def decode_step_s(self, num_decode: int, context_tokens: int) -> float:
        """A pure-decode step: `num_decode` sequences each `context_tokens` long."""
        return self.iteration_s(num_decode, 0, num_decode * context_tokens)

    def describe(self) -> str:
        """The model's figures in words, for plans and reasons."""
        basis = "fitted to measurements" if self.measured else "estimated from the datasheet"
        jumps = ", ".join(f"{j * 1e3:.0f}" for j in self.jump_s)
        return (
            f"{self.gpu} step model ({basis}): weights read in {self.weight_read_s * 1e3:.1f} ms "
            f"at {self.bandwidth_efficiency:.0%} of peak bandwidth, prefill "
            f"{self.compute_s_per_token * 1e6:.2f} us/token, steps above "
            f"{self.threshold_tokens:,} tokens jump by {jumps} ms"
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
        jump = (DEFAULT_JUMP_FRACTION * threshold * compute_s_per_token,)
        return StepTimeModel(
            gpu=profile.name,
            tensor_parallel_size=tp,
            measured=False,
            overhead_s=OVERHEAD_S,
            weight_read_s=weight_bytes_gpu / bytes_per_s,
            kv_read_s_per_token=kv_bytes_token_gpu / bytes_per_s,
            compute_s_per_token=compute_s_per_token,
            threshold_tokens=threshold,
            jump_num_decode=(0.0,),
            jump_s=jump,
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
        jump_num_decode=fit.jump_num_decode,
        jump_s=tuple(j * scale for j in fit.jump_s),
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
    jump_num_decode: tuple[float, ...]
    jump_s: tuple[float, ...]


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

    compute = (
        2.0 * study.num_parameters / (profile.bf16_dense_tflops * 1e12 * DEFAULT_PREFILL_EFFICIENCY)
    )
    if measured.heatmap is not None:
        hm = measured.heatmap
        rates = [
            (hm.baseline_ms / 1e3 * (1 + c.interference_pct / 100) - OVERHEAD_S)
            / (hm.num_decode + c.num_prefill_tokens)
            for c in hm.cells
            if not c.upper_bound
            and c.interference_pct >= _COMPUTE_BOUND_PCT
            and hm.num_decode + c.num_prefill_tokens <= threshold
        ]
        if rates:
            compute = median(rates)
    rows = [
        r
        for r in measured.mixed_steps
        if r.num_decode + r.num_prefill_tokens > threshold
        and r.num_prefill_tokens <= _FIT_MAX_THRESHOLDS * threshold
    ]
    for r in rows:
        compute = min(
            compute, (r.mixed_ms / 1e3 - OVERHEAD_S) / (r.num_decode + r.num_prefill_tokens)
        )

    by_decode: dict[float, list[float]] = {}
    for r in rows:
        d = float(r.num_decode)
        memory_s = a - OVERHEAD_S + b * d
        before = OVERHEAD_S + max(memory_s, compute * (r.num_decode + r.num_prefill_tokens))
        by_decode.setdefault(d, []).append(max(0.0, r.mixed_ms / 1e3 - before))
    if by_decode:
        xs = tuple(sorted(by_decode))
        ys = tuple(sum(by_decode[x]) / len(by_decode[x]) for x in xs)
    else:
        xs, ys = (0.0,), (DEFAULT_JUMP_FRACTION * threshold * compute,)
    return _Fit(
        params=float(study.num_parameters),
        bytes_per_s=bytes_per_s,
        context_tokens=context_tokens,
        compute_s_per_token=compute,
        jump_num_decode=xs,
        jump_s=ys,
    )


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
