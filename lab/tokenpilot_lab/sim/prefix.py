"""Prompt hashes for the prefix cache, chained as vLLM chains its block hashes.

vLLM hashes each full block of a prompt together with the hash of the block before it, so one
hash names the whole prefix up to the end of its block. The same is done here for token ids
(engine-sim's prompts, in blocks of the engine's block size) and for a trace's own prefix
hashes (Mooncake's `hash_ids`, one per 512 prompt tokens), which are chained again so that a
trace whose ids are per block rather than per prefix still shares only whole prefixes.

Python's hash of a tuple of ints is the same in every process (only str and bytes hashes are
salted), so the hashes are stable for a given input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# The parent of a prompt's first block.
_ROOT = 0x5EED


def chain(hash_ids: Iterable[int]) -> tuple[int, ...]:
    """Chained hashes of a trace's per-chunk prefix hashes, in order."""
    out = []
    parent = _ROOT
    for hash_id in hash_ids:
        parent = hash((parent, hash_id))
        out.append(parent)
    return tuple(out)


def token_block_hashes(token_ids: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of `block_size` tokens of a prompt (a partial last
    block is never cached, as in vLLM)."""
    out = []
    parent = _ROOT
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start : start + block_size])))
        out.append(parent)
    return tuple(out)
