"""The step-time model: how long one engine step takes on a GPU, from the physics of the step.

A step's work on each GPU (`tokenpilot.core.roofline`: FLOPs of the weights and of attention,
bytes of the weights and of the KV cache read and written, tensor-parallel all-reduces) falls in
two kernel groups, each priced at the rates the hardware achieves, not at its datasheet peaks:

    linear layers  compute: 2 x parameters x tokens of FLOPs   memory: every weight, read once
    attention      compute: FLOPs over the pairs attended      memory: KV read and written

    compute_s(g) = FLOPs(g) / (compute efficiency x dense datasheet FLOPS)
    memory_s(g)  = bytes(g) / (bandwidth efficiency x datasheet bandwidth)
    time(g)      = (compute_s(g)**p + memory_s(g)**p) ** (1/p)        a smooth roofline
    allreduce_s  = all-reduces x (latency + bytes per all-reduce / (0.75 x interconnect))
    step_s       = overhead_s + time(linear) + time(attention) + allreduce_s

A GEMM streams its weights from memory while its tensor cores work on the tiles already loaded,
so a kernel group takes about the larger of its arithmetic and its memory traffic, not their sum;
near the ridge (a step of about as many tokens as the achieved FLOPS per byte) neither hides the
other fully, and the group is slower than either. The p-norm gives that shape with one number:
p = 1 adds the two, p -> infinity is the sharp roofline. p is fitted on kernel timings of the
linear layers alone across the ridge (bench/step_model_fit.py, docs/tuning.md). Decode attention
is bound by its KV read, prefill attention by its FLOPs; vLLM V1 runs both in one kernel call, so
attention is one group. So a small prefill chunk beside memory-bound decode costs much less than
its arithmetic (it rides in the weight read until the step nears the ridge), and past the ridge
each prompt token costs its arithmetic.

`StepBreakdown` reports compute_s (both groups' FLOPs at the achieved rate, as if alone),
memory_s (both groups' bytes likewise) and overlap_s (what the groups save by doing both at once),
so that step_s = overhead_s + compute_s + memory_s - overlap_s + allreduce_s, and
max(compute_s, memory_s) <= compute_s + memory_s - overlap_s <= compute_s + memory_s.

Both efficiencies are below 1 and each group takes at least the larger of its two parts, so no
step is cheaper than its floor (the larger of all FLOPs at peak and all bytes at peak). The
parameters come from the profile's `stepModel` block, each naming the published data it was
fitted on (bench/data/published_steps.yaml, bench/step_model_fit.py, docs/tuning.md) or the
profile it inherits from; a profile without one uses the stated defaults below. The per-SKU
threshold (the token budget measurements ran at) is carried as an input for the tuner, never as a
price: the model has no jump.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tokenpilot.api.gpu_profile import FittedValue, GPUProfile, ParameterBasis, StepModelParameters
from tokenpilot.api.model_shape import ModelShape, model_preset
from tokenpilot.core.roofline import (
    PrefillChunk,
    StepWork,
    floor_s,
    step_totals,
    step_work,
)

# NCCL's all-reduce moves data at about this share of the link's peak (its bus bandwidth).
LINK_EFFICIENCY = 0.75
# Assumed when a profile names no interconnect: PCIe Gen4 x16, one direction.
DEFAULT_INTERCONNECT_GBPS = 32.0

_DEFAULT_DATA = (
    "default for a profile without stepModel: the {what} fitted for the built-in profiles "
    "(docs/tuning.md, 'Where each number comes from')"
)
# Parameters for a profile that carries none: the pooled fits of the built-ins, and for compute
# the lowest fitted on any architecture and engine, so an unknown GPU is not credited with more.
DEFAULT_STEP_MODEL = StepModelParameters(
    engine="vLLM V1",
    compute_efficiency=FittedValue(
        value=0.51,
        basis=ParameterBasis.default,
        data=_DEFAULT_DATA.format(
            what="lowest compute efficiency of any architecture and engine (Hopper, 2023 vLLM)"
        ),
    ),
    bandwidth_efficiency=FittedValue(
        value=0.84,
        basis=ParameterBasis.default,
        data=_DEFAULT_DATA.format(what="bandwidth efficiency"),
    ),
    overlap_exponent=FittedValue(
        value=1.6,
        basis=ParameterBasis.default,
        data=_DEFAULT_DATA.format(what="overlap exponent (Ampere and Hopper kernels, pooled)"),
    ),
    overhead_ms=FittedValue(
        value=0.7, basis=ParameterBasis.default, data=_DEFAULT_DATA.format(what="vLLM V1 overhead")
    ),
    all_reduce_latency_us=FittedValue(
        value=30,
        basis=ParameterBasis.default,
        data=_DEFAULT_DATA.format(what="all-reduce latency"),
    ),
)

Bound = Literal["compute", "memory"]


def smooth_max(a_s: float, b_s: float, p: float) -> float:
    """(a**p + b**p)**(1/p), written so that no power overflows: at least the larger of the
    two, at most their sum (p >= 1)."""
    big, small = (a_s, b_s) if a_s >= b_s else (b_s, a_s)
    if big <= 0.0:
        return 0.0
    return big * math.pow(1.0 + math.pow(small / big, p), 1.0 / p)


@dataclass(frozen=True, slots=True)
class GroupTime:
    """One kernel group of a step: its compute and memory parts and the time they take together."""

    name: str
    compute_s: float
    memory_s: float
    time_s: float


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """One step priced: the total, its terms, and the datasheet floor it can never beat.

    step_s = overhead_s + compute_s + memory_s - overlap_s + allreduce_s, where compute_s and
    memory_s sum both kernel groups' parts at the achieved rates and overlap_s is what the groups
    save by streaming memory while they compute (0 <= overlap_s <= min(compute_s, memory_s)).
    """

    step_s: float
    compute_s: float
    memory_s: float
    overlap_s: float
    overhead_s: float
    allreduce_s: float
    floor_s: float
    bound: Bound
    groups: tuple[GroupTime, ...] = ()

    def as_dict(self) -> dict[str, float | str]:
        return {
            "step_s": self.step_s,
            "compute_s": self.compute_s,
            "memory_s": self.memory_s,
            "overlap_s": self.overlap_s,
            "overhead_s": self.overhead_s,
            "allreduce_s": self.allreduce_s,
            "floor_s": self.floor_s,
            "bound": self.bound,
        }


@dataclass(frozen=True, slots=True)
class StepTimeModel:
    """Prices one step; built by `step_time_model`, cheap to call millions of times."""

    gpu: str
    tensor_parallel_size: int
    measured: bool
    threshold_tokens: int
    work: StepWork
    peak_tflops: float
    bandwidth_gbps: float
    interconnect_gbps: float
    parameters: StepModelParameters
    _s_per_flop: float = field(init=False)
    _s_per_byte: float = field(init=False)
    _s_per_link_byte: float = field(init=False)
    _weights_s: float = field(init=False)
    _p: float = field(init=False)
    _overhead_s: float = field(init=False)
    _allreduce_latency_s: float = field(init=False)

    def __post_init__(self) -> None:
        p = self.parameters
        init = object.__setattr__
        init(self, "_s_per_flop", 1.0 / (p.compute_efficiency.value * self.peak_tflops * 1e12))
        init(self, "_s_per_byte", 1.0 / (p.bandwidth_efficiency.value * self.bandwidth_gbps * 1e9))
        init(self, "_s_per_link_byte", 1.0 / (LINK_EFFICIENCY * self.interconnect_gbps * 1e9))
        init(self, "_weights_s", self.work.weight_bytes * self._s_per_byte)
        init(self, "_p", p.overlap_exponent.value)
        init(self, "_overhead_s", p.overhead_ms.value / 1e3)
        init(self, "_allreduce_latency_s", p.all_reduce_latency_us.value / 1e6)

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float:
        """Seconds for one step: `num_decodes` decodes attending `decode_context_tokens` in
        all (each its cached tokens plus itself), and the prefill chunks scheduled beside them."""
        overhead_s, linear_s, attention_s, allreduce_s = self.terms_s(
            num_decodes, decode_context_tokens, prefill_chunks
        )
        return overhead_s + linear_s + attention_s + allreduce_s

    def terms_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> tuple[float, float, float, float]:
        """The same step's price in its four terms, which add up to `iteration_s`: the fixed
        overhead, the linear layers' group, the attention group and the all-reduces. Cheap
        enough for every step of a simulation; `breakdown` has the parts of each group."""
        num_tokens = num_decodes
        pairs = decode_context_tokens
        kv_read = decode_context_tokens
        for new, computed in prefill_chunks:
            num_tokens += new
            pairs += new * computed + new * (new + 1) // 2
            kv_read += computed
        w = self.work
        return (
            self._overhead_s,
            smooth_max(w.flops_per_token * num_tokens * self._s_per_flop, self._weights_s, self._p),
            smooth_max(
                w.flops_per_pair * pairs * self._s_per_flop,
                w.kv_bytes_per_token * (kv_read + num_tokens) * self._s_per_byte,
                self._p,
            ),
            w.num_allreduces
            * (
                self._allreduce_latency_s
                + w.allreduce_bytes_per_token * num_tokens * self._s_per_link_byte
            ),
        )

    def breakdown(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> StepBreakdown:
        """The same step, term by term and group by group, with its datasheet floor."""
        num_tokens, pairs, kv_read = step_totals(num_decodes, decode_context_tokens, prefill_chunks)
        w = self.work
        groups = tuple(
            GroupTime(name, compute_s, memory_s, smooth_max(compute_s, memory_s, self._p))
            for name, compute_s, memory_s in (
                (
                    "linear layers",
                    w.flops_per_token * num_tokens * self._s_per_flop,
                    self._weights_s,
                ),
                (
                    "attention",
                    w.flops_per_pair * pairs * self._s_per_flop,
                    w.kv_bytes_per_token * (kv_read + num_tokens) * self._s_per_byte,
                ),
            )
        )
        compute_s = sum(g.compute_s for g in groups)
        memory_s = sum(g.memory_s for g in groups)
        grouped_s = sum(g.time_s for g in groups)
        allreduce_s = w.num_allreduces * (
            self._allreduce_latency_s
            + w.allreduce_bytes_per_token * num_tokens * self._s_per_link_byte
        )
        return StepBreakdown(
            step_s=self._overhead_s + grouped_s + allreduce_s,
            compute_s=compute_s,
            memory_s=memory_s,
            overlap_s=compute_s + memory_s - grouped_s,
            overhead_s=self._overhead_s,
            allreduce_s=allreduce_s,
            floor_s=floor_s(
                w.flops(num_tokens, pairs),
                w.bytes_moved(num_tokens, kv_read),
                self.peak_tflops,
                self.bandwidth_gbps,
            ),
            bound="compute" if compute_s >= memory_s else "memory",
            groups=groups,
        )

    def decode_step_s(self, num_decodes: int, context_tokens: int) -> float:
        """A pure-decode step: `num_decodes` sequences each attending `context_tokens`."""
        return self.iteration_s(num_decodes, num_decodes * context_tokens)

    def prefill_s_per_token(self) -> float:
        """The most one more prefill token adds to a step, before attention: its arithmetic,
        its KV write and its all-reduce share, none of them overlapped. A step still bound by its
        weight read charges it less."""
        w = self.work
        return (
            w.flops_per_token * self._s_per_flop
            + w.kv_bytes_per_token * self._s_per_byte
            + w.num_allreduces * w.allreduce_bytes_per_token * self._s_per_link_byte
        )

    def ridge_tokens(self) -> int:
        """Tokens a step holds when its linear layers' arithmetic equals their weight read at
        the achieved rates: below it the step is bound by the read."""
        return round(self._weights_s / (self.work.flops_per_token * self._s_per_flop))

    def describe(self) -> str:
        """The model's figures in words, for plans and reasons."""
        p = self.parameters
        values = (
            p.compute_efficiency,
            p.bandwidth_efficiency,
            p.overlap_exponent,
            p.overhead_ms,
        )
        basis = (
            "partly inherited or default parameters"
            if {v.basis for v in values} != {ParameterBasis.fitted}
            else "measured by tokenpilot calibrate"
            if (p.fitted_by or "").startswith("tokenpilot calibrate")
            else "fitted on published measurements"
        )
        return (
            f"{self.gpu} step model ({p.engine}, {basis}; see docs/tuning.md): compute at "
            f"{p.compute_efficiency.value:.0%} of {self.peak_tflops:g} TFLOPS, memory at "
            f"{p.bandwidth_efficiency.value:.0%} of {self.bandwidth_gbps:g} GB/s, each kernel "
            f"group at the smooth larger of the two (p {p.overlap_exponent.value:g}), "
            f"{p.overhead_ms.value:g} ms per step; the weights take "
            f"{self._weights_s * 1e3:.1f} ms to read, enough for the arithmetic of "
            f"{self.ridge_tokens():,} tokens (the ridge), and past it each prefill token adds "
            f"about {self.prefill_s_per_token() * 1e6:.1f} us"
        )


def step_time_model(
    profile: GPUProfile, shape: ModelShape, tensor_parallel_size: int = 1
) -> StepTimeModel:
    """The step-time model of `shape` on `profile` at this tensor parallelism."""
    work = step_work(shape, tensor_parallel_size)
    return StepTimeModel(
        gpu=profile.name,
        tensor_parallel_size=tensor_parallel_size,
        measured=profile.measured is not None,
        threshold_tokens=_threshold(profile, work),
        work=work,
        peak_tflops=profile.bf16_dense_tflops,
        bandwidth_gbps=profile.hbm_bandwidth_gbps,
        interconnect_gbps=profile.interconnect_gbps or DEFAULT_INTERCONNECT_GBPS,
        parameters=profile.step_model or DEFAULT_STEP_MODEL,
    )


def _threshold(profile: GPUProfile, work: StepWork) -> int:
    """The token budget the tuner never exceeds: the measured one, scaled to this model's
    parameters per GPU (a bigger model fills a step with fewer tokens), else an estimate."""
    measured = profile.measured
    if measured is None:
        # The study saw two classes: ~8K tokens on the ~1 PFLOPS Hopper parts, ~4K on
        # everything from 130 to 400 TFLOPS.
        return 8192 if profile.bf16_dense_tflops >= 900 else 4096
    measured_work = step_work(
        model_preset(measured.provenance.model), measured.tensor_parallel_size
    )
    scale = work.flops_per_token / measured_work.flops_per_token
    scaled = int(measured.threshold_prefill_tokens / scale) // 256 * 256
    return max(256, scaled)
