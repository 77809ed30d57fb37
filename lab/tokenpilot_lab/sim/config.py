"""The engine's limits: the scheduler flags of `vllm serve` plus the KV cache size."""

from __future__ import annotations

from dataclasses import dataclass

from tokenpilot.core.errors import InvalidSpec


class InvalidEngineConfig(InvalidSpec):
    """Engine limits that vLLM itself would refuse at start, with the field and the fix."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Scheduler limits (`--max-num-batched-tokens`, `--max-num-seqs`, `--max-model-len`,
    `--enable-chunked-prefill`), `--enable-prefix-caching` (on by default, as in vLLM V1) and
    the KV cache in blocks of `block_size` tokens.

    `num_kv_blocks` comes from the capacity planner (GPU memory left after weights and
    activations, divided by the bytes of one block).
    """

    num_kv_blocks: int
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_model_len: int = 8192
    enable_chunked_prefill: bool = True
    block_size: int = 16
    enable_prefix_caching: bool = True
    # Keep every request's gaps between tokens; off saves memory in long fleet runs.
    record_itl: bool = True
    # Run stretches of pure decode in bulk (same results, less work); off for cross-checks.
    enable_fast_forward: bool = True

    def __post_init__(self) -> None:
        for name in ("num_kv_blocks", "max_num_batched_tokens", "max_num_seqs", "max_model_len"):
            value = getattr(self, name)
            if value < 1:
                raise InvalidEngineConfig(f"{name} must be at least 1, got {value}")
        if self.block_size < 1:
            raise InvalidEngineConfig(f"block_size must be at least 1, got {self.block_size}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise InvalidEngineConfig(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least "
                f"max_num_seqs ({self.max_num_seqs}): every running sequence needs one token "
                "of the budget per step; raise the budget or lower max_num_seqs"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise InvalidEngineConfig(
                f"without chunked prefill max_num_batched_tokens ({self.max_num_batched_tokens})"
                f" must be at least max_model_len ({self.max_model_len}), or a long prompt "
                "could never be scheduled; enable chunked prefill or raise the budget"
            )
        capacity_tokens = self.num_kv_blocks * self.block_size
        if capacity_tokens < self.max_model_len:
            raise InvalidEngineConfig(
                f"the KV cache holds {capacity_tokens} tokens ({self.num_kv_blocks} blocks of "
                f"{self.block_size}), less than max_model_len ({self.max_model_len}); lower "
                "max_model_len or give the engine more memory"
            )

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_kv_blocks * self.block_size
