"""The engine's limits: the scheduler flags of `vllm serve` (`EngineLimits`), and with them the
KV cache size (`EngineConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from tokenpilot.core.capacity import CapacityPlan
from tokenpilot.core.errors import InvalidSpec


class InvalidEngineConfig(InvalidSpec):
    """Engine limits that vLLM itself would refuse at start, with the field and the fix."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLimits:
    """The scheduler's flags (`--max-num-batched-tokens`, `--max-num-seqs`, `--max-model-len`,
    `--enable-chunked-prefill`, `--block-size`) and `--enable-prefix-caching` (on by default,
    as in vLLM V1): the one definition every engine of the lab is built from."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_model_len: int = 8192
    enable_chunked_prefill: bool = True
    block_size: int = 16
    enable_prefix_caching: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig(EngineLimits):
    """The limits and the KV cache in blocks of `block_size` tokens.

    `num_kv_blocks` comes from the capacity planner (GPU memory left after weights and
    activations, divided by the bytes of one block).
    """

    num_kv_blocks: int
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

    @staticmethod
    def of(limits: EngineLimits, num_kv_blocks: int, *, record_itl: bool = True) -> EngineConfig:
        """An engine with these limits and this many KV blocks."""
        own = {f.name: getattr(limits, f.name) for f in fields(EngineLimits)}
        return EngineConfig(**own, num_kv_blocks=num_kv_blocks, record_itl=record_itl)

    @staticmethod
    def planned(
        capacity: CapacityPlan,
        *,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        enable_prefix_caching: bool = True,
    ) -> EngineConfig:
        """One replica as the capacity planner sizes it (its KV blocks, maxModelLen and block
        size) at a batching decision's budget and max_num_seqs (which keeps seqs within the
        budget). Prefix caching is on unless turned off, as in vLLM V1 (the operator renders
        no flag for it)."""
        limits = EngineLimits(
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=capacity.max_model_len,
            block_size=capacity.block_size,
            enable_prefix_caching=enable_prefix_caching,
        )
        return EngineConfig.of(limits, capacity.num_kv_blocks)
