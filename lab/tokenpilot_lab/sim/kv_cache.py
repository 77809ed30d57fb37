"""KV cache blocks, with automatic prefix caching as vLLM V1's block pool does it.

vLLM (`vllm/v1/core/block_pool.py`, `kv_cache_manager.py`):
- a full block of a prompt is cached under a hash that chains its parent block's hash, so a
  hash names the whole prefix up to the end of its block;
- a new request takes the longest run of cached blocks from the start of its prompt, but never
  its last token (at least one token is computed, to sample from);
- blocks nobody uses are free, cached or not, in one queue: a finished request's blocks go to
  its tail in reverse order (its last block first), new blocks come from its head, and a
  cached block taken from the head is evicted. So a cached prefix survives until its memory is
  needed, the least recently freed first, and a prefix loses its tail before its head;
- a cached free block that a new request hits leaves the queue (it is in use again).

Here a cache entry is a *unit*: the blocks one prompt hash covers (`blocks_per_hash` blocks; 1
when hashes are per block, 32 for a trace's 512-token hashes on 16-token blocks). A unit's
blocks are hit together, freed together tail first and evicted tail first, so a unit with a
count of its cached leading blocks holds exactly what per-block entries with hashes derived
from the unit's would: one entry and one queue item instead of up to 32. One difference from
per-block hashing: when the one-token rule cuts into a unit, none of that unit is hit (the
prompt is then cached whole; with per-block hashes this never loses anything).

Blocks a sequence holds outside units (a partial last block, generated tokens, a prompt unit
another sequence cached first) are its own; they go back to the queue as anonymous free blocks.
Without prefix caching the pool only counts.
"""

from __future__ import annotations

from collections import OrderedDict

from tokenpilot_lab.sim.request import Sequence


class CachedUnit:
    """The cached leading blocks (`num_cached` of `size`) of one prompt hash."""

    __slots__ = ("key", "num_cached", "num_refs", "size")

    def __init__(self, key: int, size: int, num_cached: int) -> None:
        self.key = key
        self.size = size
        self.num_cached = num_cached
        # Running sequences holding it; at 0 its blocks are free (and in the queue).
        self.num_refs = 1


class _FreeRun:
    """Anonymous free blocks in the queue (the value beside it counts them)."""

    __slots__ = ()


class BlockPool:
    """`num_blocks` KV blocks of `block_size` tokens; see the module docstring."""

    __slots__ = (
        "_free_queue",
        "_head_unit",
        "_num_head_free",
        "_units",
        "block_size",
        "enable_caching",
        "num_blocks",
        "num_free",
    )

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = False) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        # Free blocks, cached or not: what a new allocation may take.
        self.num_free = num_blocks
        self._units: dict[int, CachedUnit] = {}
        # The free queue, least recently freed first, kept only with caching on: anonymous
        # blocks at its head (a count: which ones is immaterial), the unit being evicted, then
        # units and runs of anonymous blocks (the value: how many; a unit's is its num_cached).
        self._num_head_free = num_blocks
        self._head_unit: CachedUnit | None = None
        self._free_queue: OrderedDict[CachedUnit | _FreeRun, int] = OrderedDict()

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, as vLLM's kv_cache_usage_perc (1.0 means full); cached
        blocks nobody uses are free."""
        return (self.num_blocks - self.num_free) / self.num_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks that hold a cached prefix, in use or free."""
        return sum(unit.num_cached for unit in self._units.values())

    def num_queued_blocks(self) -> int:
        """Blocks in the free queue, counted item by item (equals `num_free` with caching on)."""
        head = self._head_unit.num_cached if self._head_unit is not None else 0
        queued = sum(
            item.num_cached if type(item) is CachedUnit else count
            for item, count in self._free_queue.items()
        )
        return self._num_head_free + head + queued

    # ----- the prefix cache -------------------------------------------------------------------

    def find_cached(self, seq: Sequence) -> tuple[list[CachedUnit], int]:
        """The longest cached prefix of `seq`'s prompt (units, blocks), at most all of it but
        its last token. Changes nothing."""
        units: list[CachedUnit] = []
        num_blocks = 0
        if not self.enable_caching or not seq.block_hashes:
            return units, num_blocks
        max_blocks = (seq.num_tokens - 1) // self.block_size
        cache = self._units
        for key in seq.block_hashes:
            unit = cache.get(key)
            if unit is None or num_blocks + unit.num_cached > max_blocks:
                break
            units.append(unit)
            num_blocks += unit.num_cached
            if unit.num_cached < seq.blocks_per_hash:
                break  # a prompt's last, shorter unit, or its tail was evicted
        return units, num_blocks

    def allocate_with_prefix(
        self, seq: Sequence, units: list[CachedUnit], num_cached_blocks: int, num_new_tokens: int
    ) -> bool:
        """Give a sequence with nothing computed the cached `units` and blocks for
        `num_new_tokens` more; False (nothing taken) if the free blocks are short."""
        num_new_blocks = self.blocks_for(num_cached_blocks * self.block_size + num_new_tokens)
        num_new_blocks -= num_cached_blocks
        reclaimed = sum(unit.num_cached for unit in units if unit.num_refs == 0)
        if num_new_blocks + reclaimed > self.num_free:
            return False
        queue = self._free_queue
        for unit in units:
            if unit.num_refs == 0:
                if unit is self._head_unit:
                    self._head_unit = None
                else:
                    del queue[unit]
            unit.num_refs += 1
        self.num_free -= reclaimed
        seq.held_units = units
        seq.num_shared_blocks = seq.num_blocks = num_cached_blocks
        self._take(num_new_blocks)
        seq.num_blocks += num_new_blocks
        self._cache_prompt_blocks(seq, num_cached_blocks * self.block_size + num_new_tokens)
        return True

    # ----- blocks -------------------------------------------------------------------------

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow `seq` to hold `num_new_tokens` more tokens; False (nothing taken) if short."""
        num_tokens = seq.num_computed_tokens + num_new_tokens
        needed = self.blocks_for(num_tokens) - seq.num_blocks
        if needed > 0:
            if needed > self.num_free:
                return False
            self._take(needed)
            seq.num_blocks += needed
        if (
            self.enable_caching
            and seq.block_hashes
            and seq.num_computed_tokens < seq.num_prompt_tokens
        ):
            self._cache_prompt_blocks(seq, num_tokens)
        return True

    def grow(self, seq: Sequence, num_blocks: int) -> None:
        """Give `seq` `num_blocks` more of its own blocks; the caller checked they are free."""
        self._take(num_blocks)
        seq.num_blocks += num_blocks

    def free(self, seq: Sequence) -> None:
        """Return `seq`'s blocks: its own first, then its units from the last one (vLLM frees
        a request's blocks in reverse, so its prefix's head is evicted last)."""
        own = seq.num_blocks - seq.num_shared_blocks
        if not self.enable_caching:
            self.num_free += own
        else:
            self._push_anonymous(own)
            queue = self._free_queue
            for unit in reversed(seq.held_units):
                unit.num_refs -= 1
                if unit.num_refs == 0:
                    queue[unit] = unit.num_cached
                    self.num_free += unit.num_cached
            seq.held_units = []
        seq.num_blocks = seq.num_shared_blocks = 0

    # ----- internals ----------------------------------------------------------------------

    def _take(self, num_blocks: int) -> None:
        """Take blocks from the head of the free queue, evicting the cached ones taken."""
        self.num_free -= num_blocks
        if not self.enable_caching:
            return
        queue = self._free_queue
        while num_blocks > self._num_head_free:
            num_blocks -= self._num_head_free
            self._num_head_free = 0
            unit = self._head_unit
            if unit is None:
                item, count = queue.popitem(last=False)
                if type(item) is _FreeRun:
                    self._num_head_free = count
                    continue
                assert type(item) is CachedUnit
                unit = self._head_unit = item
            taken = min(unit.num_cached, num_blocks)
            num_blocks -= taken
            unit.num_cached -= taken  # its tail blocks go first
            if unit.num_cached == 0:
                del self._units[unit.key]
                self._head_unit = None
        self._num_head_free -= num_blocks

    def _push_anonymous(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            return
        self.num_free += num_blocks
        queue = self._free_queue
        if not queue and self._head_unit is None:
            self._num_head_free += num_blocks
            return
        tail = next(reversed(queue), None)
        if type(tail) is _FreeRun:
            queue[tail] += num_blocks
        else:
            queue[_FreeRun()] = num_blocks

    def _cache_prompt_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Cache the full prompt blocks `seq` will hold once `num_tokens` are computed (vLLM
        caches them when they are scheduled). A unit another sequence cached first stays that
        sequence's; this one keeps its copy as its own blocks and caches no further."""
        block_size = self.block_size
        per_hash = seq.blocks_per_hash
        num_full = min(num_tokens, seq.num_prompt_tokens) // block_size
        held = seq.held_units
        if held:
            last = held[-1]
            start = (len(held) - 1) * per_hash
            mine = seq.num_shared_blocks - start
            if mine < last.size:
                if last.num_cached != mine:
                    return  # another sequence completed this unit: ours is a copy
                grown = min(last.size, num_full - start) - mine
                if grown > 0:
                    last.num_cached += grown
                    seq.num_shared_blocks += grown
                if last.num_cached < last.size:
                    return
        hashes = seq.block_hashes
        cache = self._units
        first = len(held)
        # Whole units first (the common case, in bulk), then at most one partial one.
        end = min(len(hashes), num_full // per_hash)
        for i in range(first, end):
            key = hashes[i]
            if key in cache:
                seq.num_shared_blocks += (i - first) * per_hash
                return
            unit = CachedUnit(key, per_hash, per_hash)
            cache[key] = unit
            held.append(unit)
        seq.num_shared_blocks += max(0, end - first) * per_hash
        i = max(first, end)
        start = i * per_hash
        size = min(per_hash, seq.num_prompt_tokens // block_size - start)
        num_done = min(size, num_full - start)
        if i >= len(hashes) or num_done <= 0:
            return
        key = hashes[i]
        if key in cache:
            return
        unit = CachedUnit(key, size, num_done)
        cache[key] = unit
        held.append(unit)
        seq.num_shared_blocks += num_done
