"""The step-time model: how long one engine step takes on a GPU, from the physics of the step.

A step's work on each GPU (`tokenpilot.core.roofline`: FLOPs of the weights and of attention,
bytes of the weights and of the KV cache read and written, tensor-parallel all-reduces) is priced
at the rates the hardware achieves, not at its datasheet peaks:

    compute_s   = FLOPs / (compute efficiency x dense datasheet FLOPS)
    memory_s    = bytes / (bandwidth efficiency x datasheet bandwidth)
    allreduce_s = all-reduces x (latency + bytes per all-reduce / (0.75 x interconnect))
    step_s      = overhead_s + compute_s + memory_s + allreduce_s

Both efficiencies are below 1, so no step is cheaper than its floor (the larger of FLOPs at peak
and bytes at peak). Compute and memory add rather than overlap: published prefill times near the
ridge point (a 128-token prompt reads every weight once and does little arithmetic with each) cost
about the sum of the two, not the larger, and a step of a few hundred tokens runs its small GEMMs
below peak. So the achieved fraction of peak FLOPS rises with the tokens in a step and never
reaches the efficiency, and the cost in tokens is linear (plus attention's pairs) with no cliff.
A prefill chunk does not ride free beside decode: each of its tokens costs 2 x parameters of
arithmetic, and the budget the tuner picks follows from that.

The parameters come from the profile's `stepModel` block, each naming the published data it was
fitted on (bench/data/published_steps.yaml, bench/step_model_fit.py, docs/tuning.md) or the
profile it inherits from; a profile without one uses the stated defaults below. The per-SKU
threshold (the token budget measurements ran at) is carried as an input for the tuner, never as a
price: the model has no jump.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tokenpilot.api.model_shape import ModelShape, model_preset
from tokenpilot.core.profiles import (
    FittedValue,
    GPUProfile,
    ParameterBasis,
    StepModelParameters,
)
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
# the lower of the two architectures fitted, so an unknown GPU is not credited with more.
DEFAULT_STEP_MODEL = StepModelParameters(
    engine="vLLM V1",
    compute_efficiency=FittedValue(
        value=0.46,
        basis=ParameterBasis.default,
        data=_DEFAULT_DATA.format(what="lower of the Ampere and Hopper compute efficiencies"),
    ),
    bandwidth_efficiency=FittedValue(
        value=0.82,
        basis=ParameterBasis.default,
        data=_DEFAULT_DATA.format(what="bandwidth efficiency"),
    ),
    overhead_ms=FittedValue(
        value=0.6, basis=ParameterBasis.default, data=_DEFAULT_DATA.format(what="vLLM V1 overhead")
    ),
    all_reduce_latency_us=FittedValue(
        value=30,
        basis=ParameterBasis.default,
        data=_DEFAULT_DATA.format(what="all-reduce latency"),
    ),
)

Bound = Literal["compute", "memory"]


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """One step priced: the total, its terms, and the datasheet floor it can never beat."""

    step_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    allreduce_s: float
    floor_s: float
    bound: Bound

    def as_dict(self) -> dict[str, float | str]:
        return {
            "step_s": self.step_s,
            "compute_s": self.compute_s,
            "memory_s": self.memory_s,
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
    _overhead_s: float = field(init=False)
    _allreduce_latency_s: float = field(init=False)

    def __post_init__(self) -> None:
        p = self.parameters
        init = object.__setattr__
        init(self, "_s_per_flop", 1.0 / (p.compute_efficiency.value * self.peak_tflops * 1e12))
        init(self, "_s_per_byte", 1.0 / (p.bandwidth_efficiency.value * self.bandwidth_gbps * 1e9))
        init(self, "_s_per_link_byte", 1.0 / (LINK_EFFICIENCY * self.interconnect_gbps * 1e9))
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
        num_tokens = num_decodes
        pairs = decode_context_tokens
        kv_read = decode_context_tokens
        for new, computed in prefill_chunks:
            num_tokens += new
            pairs += new * computed + new * (new + 1) // 2
            kv_read += computed
        w = self.work
        return (
            self._overhead_s
            + (w.flops_per_token * num_tokens + w.flops_per_pair * pairs) * self._s_per_flop
            + (w.weight_bytes + w.kv_bytes_per_token * (kv_read + num_tokens)) * self._s_per_byte
            + w.num_allreduces
            * (
                self._allreduce_latency_s
                + w.allreduce_bytes_per_token * num_tokens * self._s_per_link_byte
            )
        )

    def breakdown(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> StepBreakdown:
        """The same step, term by term, with its datasheet floor."""
        num_tokens, pairs, kv_read = step_totals(num_decodes, decode_context_tokens, prefill_chunks)
        w = self.work
        flops = w.flops(num_tokens, pairs)
        bytes_moved = w.bytes_moved(num_tokens, kv_read)
        compute_s = flops * self._s_per_flop
        memory_s = bytes_moved * self._s_per_byte
        allreduce_s = w.num_allreduces * (
            self._allreduce_latency_s
            + w.allreduce_bytes_per_token * num_tokens * self._s_per_link_byte
        )
        return StepBreakdown(
            step_s=self._overhead_s + compute_s + memory_s + allreduce_s,
            compute_s=compute_s,
            memory_s=memory_s,
            overhead_s=self._overhead_s,
            allreduce_s=allreduce_s,
            floor_s=floor_s(flops, bytes_moved, self.peak_tflops, self.bandwidth_gbps),
            bound="compute" if compute_s >= memory_s else "memory",
        )

    def decode_step_s(self, num_decodes: int, context_tokens: int) -> float:
        """A pure-decode step: `num_decodes` sequences each attending `context_tokens`."""
        return self.iteration_s(num_decodes, num_decodes * context_tokens)

    def prefill_s_per_token(self) -> float:
        """What one more prefill token adds to a step, before attention."""
        w = self.work
        return (
            w.flops_per_token * self._s_per_flop
            + w.kv_bytes_per_token * self._s_per_byte
            + w.num_allreduces * w.allreduce_bytes_per_token * self._s_per_link_byte
        )

    def describe(self) -> str:
        """The model's figures in words, for plans and reasons."""
        p = self.parameters
        bases = {v.basis for v in (p.compute_efficiency, p.bandwidth_efficiency, p.overhead_ms)}
        basis = (
            "fitted on published measurements"
            if bases == {ParameterBasis.fitted}
            else "partly inherited or default parameters"
        )
        weights_ms = self.work.weight_bytes * self._s_per_byte * 1e3
        return (
            f"{self.gpu} step model ({p.engine}, {basis}; see docs/tuning.md): compute at "
            f"{p.compute_efficiency.value:.0%} of {self.peak_tflops:g} TFLOPS, memory at "
            f"{p.bandwidth_efficiency.value:.0%} of {self.bandwidth_gbps:g} GB/s, "
            f"{p.overhead_ms.value:g} ms per step; the weights take {weights_ms:.1f} ms to read "
            f"and each prefill token adds {self.prefill_s_per_token() * 1e6:.1f} us"
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
