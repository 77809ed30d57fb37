"""The engine limits of one replica: KV cache size from GPU memory, and the batching flags.

KV blocks are what vLLM would find after loading the weights: GPU memory times
`gpu_memory_utilization`, minus the weights per GPU, divided by the bytes of one block per GPU.
Activation and CUDA-graph memory are not subtracted, so the cache is slightly optimistic (more
room before preemption); all policies share the same figure. `max_model_len` is what the cache
can hold, capped at `max_context_tokens` (131,072 for the Llama 3.1 family).
"""

from __future__ import annotations

from tokenpilot.api.model_shape import ModelShape
from tokenpilot.core.errors import Infeasible
from tokenpilot.core.sim import EngineConfig

GIB = 2**30
BLOCK_SIZE = 16  # vLLM's default --block-size on CUDA


def engine_config(
    *,
    memory_gib: float,
    shape: ModelShape,
    tensor_parallel_size: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    gpu_memory_utilization: float = 0.9,
    max_context_tokens: int = 131_072,
) -> EngineConfig:
    tp = tensor_parallel_size
    free_bytes = memory_gib * GIB * gpu_memory_utilization - shape.weight_bytes / tp
    kv_bytes_per_token = shape.kv_bytes_per_token / min(tp, shape.num_kv_heads)
    num_kv_tokens = int(free_bytes // kv_bytes_per_token) if free_bytes > 0 else 0
    if num_kv_tokens < BLOCK_SIZE:
        raise Infeasible(
            f"the weights ({shape.weight_bytes / tp / GIB:.1f} GiB per GPU) leave no room for "
            f"a KV cache in {memory_gib:g} GiB x {gpu_memory_utilization:g}; raise the tensor "
            "parallelism or choose a larger GPU"
        )
    return EngineConfig(
        num_kv_blocks=num_kv_tokens // BLOCK_SIZE,
        max_num_batched_tokens=max(max_num_batched_tokens, min(max_num_seqs, 1)),
        max_num_seqs=min(max_num_seqs, max_num_batched_tokens),
        max_model_len=min(max_context_tokens, (num_kv_tokens // BLOCK_SIZE) * BLOCK_SIZE),
        block_size=BLOCK_SIZE,
    )
