"""The engine limits of one replica: the capacity planner's KV cache and the batching flags."""

from __future__ import annotations

from tokenpilot.core.capacity import CapacityPlan
from tokenpilot_lab.sim import EngineConfig


def engine_config(
    capacity: CapacityPlan,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enable_prefix_caching: bool = True,
) -> EngineConfig:
    """vLLM's limits for one replica: KV blocks and max_model_len from `plan_capacity`; the
    budget and max_num_seqs from a batching decision (which keeps seqs within the budget).
    Prefix caching is on unless turned off, as in vLLM V1 (the operator renders no flag for it).
    """
    return EngineConfig(
        num_kv_blocks=capacity.num_kv_blocks,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=capacity.max_model_len,
        block_size=capacity.block_size,
        enable_prefix_caching=enable_prefix_caching,
    )
