"""One scheduling decision, after vLLM V1's scheduler (no spec decode).

The algorithm, as in vLLM V1:
1. Walk the running queue in order. Each sequence asks for every token it has not computed
   yet (1 for a decode, the rest of its prompt for a chunked prefill), capped by the token
   budget left. If its KV blocks cannot grow, preempt the newest running sequence (free its
   blocks, send it to the front of the waiting queue to recompute) and retry; if the sequence
   itself was the newest, stop.
2. Only if nothing was preempted, walk the waiting queue in arrival order while budget and
   `max_num_seqs` allow. With prefix caching a sequence first takes the longest cached prefix
   of its prompt (never its last token): those tokens count as computed and cost nothing.
   A prompt whose KV was handed over by a prefill engine (disaggregated serving) is not looked
   up: those tokens count as computed likewise, until a preemption frees them.
   It then takes the rest of its prompt, or with chunked prefill the part that fits the
   budget. Without chunked prefill a prompt larger than the budget left waits, and so does
   everyone behind it (FCFS). A sequence whose blocks do not fit also waits.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tokenpilot.core.roofline import PrefillChunk
from tokenpilot_lab.sim.config import EngineConfig
from tokenpilot_lab.sim.kv_cache import BlockPool
from tokenpilot_lab.sim.request import Sequence


@dataclass(slots=True)
class Schedule:
    """The decision for one step: who runs with how many tokens, and who was preempted."""

    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    # vLLM's prefix-cache counters, in tokens: looked up (the whole sequence) and found.
    num_prefix_cache_queries: int = 0
    num_prefix_cache_hits: int = 0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    # What the step timer prices: the decodes' attended context, and each prefill chunk.
    decode_context_tokens: int = 0
    prefill_chunks: list[PrefillChunk] = field(default_factory=list)


def schedule(
    config: EngineConfig,
    pool: BlockPool,
    running: list[Sequence],
    waiting: deque[Sequence],
    start_s: float,
) -> Schedule:
    """Decide one step starting at `start_s`, mutating queues and blocks (not token counts)."""
    out = Schedule()
    budget = config.max_num_batched_tokens
    i = 0
    while i < len(running) and budget > 0:
        seq = running[i]
        num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
        can_run = True
        while not pool.allocate(seq, num_new):
            victim = running.pop()
            pool.free(victim)
            victim.num_computed_tokens = 0
            victim.num_preemptions += 1
            waiting.appendleft(victim)
            out.preempted.append(victim)
            if victim is seq:
                can_run = False
                break
        if not can_run:
            break
        _take(out, seq, num_new)
        budget -= num_new
        i += 1

    if not out.preempted:
        chunked = config.enable_chunked_prefill
        caching = pool.enable_caching
        while waiting and budget > 0 and len(running) < config.max_num_seqs:
            seq = waiting[0]
            if seq.arrival_s > start_s:
                break
            # A waiting sequence has nothing computed (new, or preempted and recomputing). KV
            # handed over by a prefill engine counts as computed until a preemption frees it;
            # such a prompt is not looked up in the prefix cache.
            handed = seq.num_handed_over_tokens if seq.num_preemptions == 0 else 0
            looked_up = caching and not handed
            if looked_up:
                units, num_cached_blocks = pool.find_cached(seq)
                num_cached = num_cached_blocks * pool.block_size
            else:
                num_cached = handed
            num_new = seq.num_tokens - num_cached
            if num_new > budget:
                if not chunked:
                    break
                num_new = budget
            if looked_up:
                if not pool.allocate_with_prefix(seq, units, num_cached_blocks, num_new):
                    break
                seq.num_computed_tokens = num_cached
                out.num_prefix_cache_queries += seq.num_tokens
                out.num_prefix_cache_hits += num_cached
                if seq.num_cached_tokens is None:
                    seq.num_cached_tokens = num_cached
            elif pool.allocate(seq, num_cached + num_new):
                seq.num_computed_tokens = num_cached
            else:
                break
            waiting.popleft()
            running.append(seq)
            if seq.first_scheduled_s is None:
                seq.first_scheduled_s = start_s
            _take(out, seq, num_new)
            budget -= num_new
    return out


def _take(out: Schedule, seq: Sequence, num_new: int) -> None:
    out.scheduled.append((seq, num_new))
    # A decode feeds back one sampled token; anything else (first prefill, a chunk, or a
    # recompute after preemption) is prompt work.
    if num_new == 1 and seq.num_computed_tokens >= seq.num_prompt_tokens:
        out.num_decode_tokens += 1
        out.decode_context_tokens += seq.num_computed_tokens + 1
    else:
        out.num_prefill_tokens += num_new
        out.prefill_chunks.append(PrefillChunk(num_new, seq.num_computed_tokens))
