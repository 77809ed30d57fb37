"""KV cache accounting in fixed-size blocks (counts only: no prefix sharing, no eviction)."""

from __future__ import annotations

from tokenpilot_lab.sim.request import Sequence


class BlockPool:
    """A pool of `num_blocks` KV blocks of `block_size` tokens each."""

    __slots__ = ("block_size", "num_blocks", "num_free")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_free = num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow `seq` to hold `num_new_tokens` more tokens; False (nothing taken) if short."""
        needed = self.blocks_for(seq.num_computed_tokens + num_new_tokens) - seq.num_blocks
        if needed <= 0:
            return True
        if needed > self.num_free:
            return False
        self.num_free -= needed
        seq.num_blocks += needed
        return True

    def free(self, seq: Sequence) -> None:
        self.num_free += seq.num_blocks
        seq.num_blocks = 0

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, as vLLM's kv_cache_usage_perc (1.0 means full)."""
        return (self.num_blocks - self.num_free) / self.num_blocks
