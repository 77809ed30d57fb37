"""The capacity planner: what fits on one replica's GPUs, in bytes, blocks and sequences.

Per GPU at tensor parallelism `tp`, the engine may use memory x gpuMemoryUtilization. From that
come the weights (their share at `tp`) and a runtime reserve; the rest is KV cache, cut into
blocks of 16 tokens as vLLM does. A token's KV costs 2 x layers x KV heads x head dim x dtype
bytes, spread over the ranks that hold its heads. The concurrency that fits is the number of
sequences of the expected context whose blocks all fit at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.model_shape import ModelShape
from tokenpilot.core.errors import Infeasible, InvalidSpec

GIB = 1024**3
BLOCK_SIZE = 16
# CUDA context, CUDA graphs and the activations of one step stay out of the KV cache; vLLM
# measures them at start-up, typically 1-2 GiB for 8B-class models.
RUNTIME_RESERVE_GIB = 1.5


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """Memory per GPU and what it holds; counts are per replica (all `tp` ranks together)."""

    gpu: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    usable_gib: float
    weights_gib_per_gpu: float
    reserve_gib: float
    kv_cache_gib_per_gpu: float
    kv_bytes_per_token: float
    block_size: int
    num_kv_blocks: int
    num_kv_tokens: int
    max_model_len: int
    expected_context_tokens: int
    max_concurrency: int
    reason: str

    def at_context(self, expected_context_tokens: int) -> CapacityPlan:
        """The same memory, with the concurrency that fits at another expected context."""
        context = expected_context_tokens
        _check_context(context, self.max_model_len)
        if context == self.expected_context_tokens:
            return self
        max_concurrency = self.num_kv_blocks // math.ceil(context / BLOCK_SIZE)
        reason = _reason(
            self.gpu,
            self.tensor_parallel_size,
            self.usable_gib,
            self.weights_gib_per_gpu,
            self.kv_cache_gib_per_gpu,
            self.num_kv_blocks,
            self.kv_bytes_per_token,
            max_concurrency,
            context,
        )
        return replace(
            self,
            expected_context_tokens=context,
            max_concurrency=max_concurrency,
            reason=reason,
        )


def kv_bytes_per_token_per_gpu(shape: ModelShape, tensor_parallel_size: int) -> float:
    """KV bytes one token costs on each GPU: heads split across ranks, replicated past one each."""
    return shape.kv_bytes_per_token / min(tensor_parallel_size, shape.num_kv_heads)


def plan_capacity(
    profile: GPUProfile,
    shape: ModelShape,
    tensor_parallel_size: int,
    gpu_memory_utilization: float,
    max_model_len: int,
    expected_context_tokens: int | None = None,
) -> CapacityPlan:
    """What fits; `Infeasible` with needed vs available GiB when the weights or one full-length
    sequence do not."""
    tp = tensor_parallel_size
    if tp < 1 or shape.num_attention_heads % tp != 0:
        raise InvalidSpec(
            f"tensorParallelSize {tp} must be at least 1 and divide numAttentionHeads "
            f"({shape.num_attention_heads})"
        )
    if not 0 < gpu_memory_utilization <= 1:
        raise InvalidSpec(
            f"gpuMemoryUtilization must be in (0, 1], got {gpu_memory_utilization}; "
            f"write a fraction such as 0.9"
        )
    if max_model_len < 1:
        raise InvalidSpec(f"maxModelLen must be at least 1, got {max_model_len}")
    context = max_model_len if expected_context_tokens is None else expected_context_tokens
    _check_context(context, max_model_len)

    usable_gib = profile.memory_gib * gpu_memory_utilization
    weights_gib = shape.weight_bytes / tp / GIB
    needed_gib = weights_gib + RUNTIME_RESERVE_GIB
    if needed_gib >= usable_gib:
        raise Infeasible(
            f"weights need {weights_gib:.1f} GiB per GPU at tensorParallelSize {tp}, plus a "
            f"{RUNTIME_RESERVE_GIB} GiB reserve, but {profile.name} offers {usable_gib:.1f} GiB "
            f"at gpuMemoryUtilization {gpu_memory_utilization}; "
            f"{_fix_for_weights(profile, shape, gpu_memory_utilization)}"
        )

    kv_bytes = kv_bytes_per_token_per_gpu(shape, tp)
    kv_cache_gib = usable_gib - needed_gib
    num_kv_blocks = int(kv_cache_gib * GIB // (kv_bytes * BLOCK_SIZE))
    num_kv_tokens = num_kv_blocks * BLOCK_SIZE
    blocks_per_max_len = math.ceil(max_model_len / BLOCK_SIZE)
    if num_kv_blocks < blocks_per_max_len:
        needed_kv_gib = blocks_per_max_len * BLOCK_SIZE * kv_bytes / GIB
        raise Infeasible(
            f"one sequence at maxModelLen {max_model_len} needs {needed_kv_gib:.2f} GiB of KV "
            f"cache per GPU, but only {kv_cache_gib:.2f} GiB is left after the weights on "
            f"{profile.name}; lower maxModelLen to {num_kv_tokens} or less, raise "
            f"gpuMemoryUtilization or tensorParallelSize, or pick a GPU with more memory"
        )
    max_concurrency = num_kv_blocks // math.ceil(context / BLOCK_SIZE)
    reason = _reason(
        profile.name,
        tp,
        usable_gib,
        weights_gib,
        kv_cache_gib,
        num_kv_blocks,
        kv_bytes,
        max_concurrency,
        context,
    )
    return CapacityPlan(
        gpu=profile.name,
        tensor_parallel_size=tp,
        gpu_memory_utilization=gpu_memory_utilization,
        usable_gib=usable_gib,
        weights_gib_per_gpu=weights_gib,
        reserve_gib=RUNTIME_RESERVE_GIB,
        kv_cache_gib_per_gpu=kv_cache_gib,
        kv_bytes_per_token=kv_bytes,
        block_size=BLOCK_SIZE,
        num_kv_blocks=num_kv_blocks,
        num_kv_tokens=num_kv_tokens,
        max_model_len=max_model_len,
        expected_context_tokens=context,
        max_concurrency=max_concurrency,
        reason=reason,
    )


def _check_context(context: int, max_model_len: int) -> None:
    if not 1 <= context <= max_model_len:
        raise InvalidSpec(
            f"expected context {context} tokens must be between 1 and maxModelLen ({max_model_len})"
        )


def _reason(
    gpu: str,
    tp: int,
    usable_gib: float,
    weights_gib: float,
    kv_cache_gib: float,
    num_kv_blocks: int,
    kv_bytes: float,
    max_concurrency: int,
    context: int,
) -> str:
    return (
        f"{gpu} x{tp}: {usable_gib:.1f} GiB usable per GPU, weights "
        f"{weights_gib:.1f} GiB, reserve {RUNTIME_RESERVE_GIB} GiB, KV cache "
        f"{kv_cache_gib:.1f} GiB = {num_kv_blocks:,} blocks of {BLOCK_SIZE} tokens "
        f"({num_kv_blocks * BLOCK_SIZE:,} tokens at {kv_bytes / 1024:.0f} KiB each); "
        f"{max_concurrency} sequences of {context:,} tokens fit at once"
    )


def _fix_for_weights(profile: GPUProfile, shape: ModelShape, utilization: float) -> str:
    usable_gib = profile.memory_gib * utilization
    for tp in (2, 4, 8):
        if shape.num_attention_heads % tp == 0 and (
            shape.weight_bytes / tp / GIB + RUNTIME_RESERVE_GIB < usable_gib
        ):
            return (
                f"set tensorParallelSize to {tp} or more, pick a GPU with more memory, "
                f"or quantize the weights"
            )
    return "pick a GPU with more memory or quantize the weights"
