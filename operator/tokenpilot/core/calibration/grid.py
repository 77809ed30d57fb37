"""The calibration grid: which decode mixes and bursts to measure, and what steps each runs.

A grid point is one probe condition: `num_decode` streams of `context_tokens` each, then a burst
of `num_prefill` prompts of `prefill_len` tokens. Bursts come in two kinds, sized from the
engine's token budget B (max_num_batched_tokens) so that every step they occupy is known:

    under the budget   the whole burst fits beside the decodes in one step (P x L <= B - N)
    over the budget    4 prompts of exactly B - N tokens: each fills one step, so the burst
                       spills into 4 steps, every one of them full

A point gives two observations: the decode step before the burst (its baseline) and the mean of
the steps that carried the burst. Every fourth point is held out of the fit, so accuracy is
claimed on points the fit never saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.roofline import PrefillChunk

OVER_BUDGET_PROMPTS = 4
# Decode streams need room to keep running through a point's windows beside their prompt.
DECODE_HEADROOM_TOKENS = 512
# Share of the KV cache the grid's decodes may fill, so a burst never preempts them.
KV_SHARE = 0.7
HELD_OUT_EVERY = 4
# The fewest prompt tokens beside the decodes for a step whose prefill shows in its time.
MIN_ROOM = 128


class GridSize(StrEnum):
    quick = "quick"
    full = "full"


_DECODES = {GridSize.quick: (8, 32), GridSize.full: (4, 16, 32, 64)}
_CONTEXTS = {GridSize.quick: (256, 1536), GridSize.full: (256, 1024, 2048)}


class BurstKind(StrEnum):
    under = "under"
    over = "over"


@dataclass(frozen=True, slots=True)
class GridPoint:
    index: int
    num_decode: int
    context_tokens: int
    num_prefill: int
    prefill_len: int
    kind: BurstKind
    held_out: bool

    @property
    def burst_tokens(self) -> int:
        return self.num_prefill * self.prefill_len

    def label(self) -> str:
        return (
            f"{self.num_decode} decodes x {self.context_tokens} ctx, "
            f"{self.num_prefill} x {self.prefill_len} prefill ({self.kind.value} budget)"
        )


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step: decodes with their total context, and the prefill chunks beside them."""

    num_decode: int
    decode_context_tokens: int
    prefill_chunks: tuple[PrefillChunk, ...] = ()


def _bursts(size: GridSize, room: int) -> list[tuple[int, int, BurstKind]]:
    # One prompt filling the room is the step a threshold describes (one chunk beside the
    # decodes); on a memory-bound card it is the only step whose compute shows at all.
    under = [(1, min(64, room), BurstKind.under), (1, room, BurstKind.under)]
    if size is GridSize.full:
        under += [(2, room // 2, BurstKind.under), (1, room // 4, BurstKind.under)]
    return [*under, (OVER_BUDGET_PROMPTS, room, BurstKind.over)]


def plan_grid(
    size: GridSize,
    budget_tokens: int,
    max_model_len: int,
    kv_capacity_tokens: int | None = None,
) -> list[GridPoint]:
    """The points of a `size` grid for an engine with this budget, context limit and KV cache
    (None when the endpoint does not report it); a mix that does not fit is left out."""
    points: list[GridPoint] = []
    for num_decode in _DECODES[size]:
        room = budget_tokens - num_decode
        if room < MIN_ROOM:
            continue
        for context in _CONTEXTS[size]:
            if context + DECODE_HEADROOM_TOKENS > max_model_len or room > max_model_len:
                continue
            kv_needed = num_decode * (context + DECODE_HEADROOM_TOKENS) + room
            if kv_capacity_tokens is not None and kv_needed > KV_SHARE * kv_capacity_tokens:
                continue
            for num_prefill, prefill_len, kind in _bursts(size, room):
                index = len(points)
                points.append(
                    GridPoint(
                        index=index,
                        num_decode=num_decode,
                        context_tokens=context,
                        num_prefill=num_prefill,
                        prefill_len=prefill_len,
                        kind=kind,
                        held_out=index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1,
                    )
                )
    if len(points) < 2 * HELD_OUT_EVERY:
        # Every decode level brings the same points, so the grid needs this many levels' room.
        levels = -(-2 * HELD_OUT_EVERY // (len(_CONTEXTS[size]) * len(_bursts(size, MIN_ROOM))))
        smallest = sorted(_DECODES[size])[levels - 1] + MIN_ROOM
        raise InvalidSpec(
            f"the {size.value} grid has {len(points)} points for a budget of {budget_tokens} "
            f"tokens and a max model length of {max_model_len} (KV cache "
            f"{kv_capacity_tokens or 'unknown'} tokens); start the engine with "
            f"--max-model-len of at least {_CONTEXTS[size][-1] + DECODE_HEADROOM_TOKENS} and "
            f"a budget of at least {smallest} tokens"
        )
    return points


def burst_steps(
    num_decode: int, decode_context_tokens: int, prompts: Sequence[int], budget_tokens: int
) -> list[Step]:
    """The steps a burst of `prompts` (lengths) occupies beside `num_decode` decodes: vLLM's
    scheduler puts the decodes first and fills the rest of the budget with prompt chunks in
    arrival order, a prompt continuing where its last chunk stopped."""
    room = budget_tokens - num_decode
    if room <= 0:
        raise InvalidSpec(f"a budget of {budget_tokens} tokens leaves no room beside {num_decode}")
    remaining = [[length, 0] for length in prompts]
    steps = []
    while any(left > 0 for left, _ in remaining):
        free = room
        chunks = []
        for prompt in remaining:
            left, done = prompt
            if left <= 0 or free <= 0:
                continue
            take = min(left, free)
            chunks.append(PrefillChunk(take, done))
            prompt[0], prompt[1] = left - take, done + take
            free -= take
        steps.append(Step(num_decode, decode_context_tokens, tuple(chunks)))
    return steps
