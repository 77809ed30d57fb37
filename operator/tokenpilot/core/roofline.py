"""The physics of one engine step: the work it does on each GPU, and the floor no GPU can beat.

A step processes n tokens: one per running decode, plus prefill chunks. Per GPU at tensor
parallelism tp (weights and attention heads split across the ranks):

    FLOPs = 2 x parameters / tp x n                         every token meets every weight once
          + 4 x layers x query heads x head dim / tp x pairs  attention: QK^T and PV
    bytes = weight bytes / tp                                 every weight is read once a step
          + KV bytes per token per GPU x (context read + n)   the cache read, and the new entries

`pairs` counts (query, key) pairs attended. A decode attends its whole context (the tokens already
in its KV cache and itself); a prefill chunk of c new tokens after o computed ones attends
c x o + c (c + 1) / 2 (causal). The context read is the decodes' contexts plus each chunk's o.

The floor of a step is the larger of its FLOPs at 100 % of the dense datasheet peak and its bytes
at 100 % of the datasheet bandwidth. Counting 2 x all parameters per token is the conventional
accounting (it charges the embedding lookup and the LM head as matmuls for every token); the
activations, norms and the all-reduce are left out, so the floor stays below what any kernel
achieves. Tensor parallelism adds two all-reduces per layer of n x hidden x 2 bytes each, which
`tokenpilot.core.steptime` prices from the interconnect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from tokenpilot.api.model_shape import ModelShape
from tokenpilot.core.errors import InvalidSpec

# Activations cross the interconnect in 16-bit even when weights or KV are stored narrower.
ACTIVATION_BYTES = 2.0
ALLREDUCES_PER_LAYER = 2


class PrefillChunk(NamedTuple):
    """Prompt tokens of one sequence computed in a step, after `num_computed_tokens` already
    in its KV cache (a prefix cache hit or earlier chunks)."""

    num_new_tokens: int
    num_computed_tokens: int = 0


class StepPricer(Protocol):
    """Anything that prices one forward pass (`core.steptime.StepTimeModel`): what the tuner,
    the capacity model and the lab's engine ask of a step-time model.

    `decode_context_tokens` sums, over the decodes, the tokens each attends (the ones already in
    its KV cache plus itself); each prefill chunk carries its new tokens and the tokens already
    computed before it (earlier chunks, or a cached prefix), which it attends and reads.
    """

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float: ...


@dataclass(frozen=True, slots=True)
class ScaledPricer:
    """`pricer`'s price of every step times `factor`: engines measured slower than their
    profile prices them. Never faster: the profile's efficiencies are fitted under 100 % of
    the datasheet, and a factor under 1 could price a step past the physical floor."""

    pricer: StepPricer
    factor: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and self.factor >= 1.0):
            raise ValueError(
                f"a step price may only be scaled up (factor >= 1), got {self.factor}: a "
                "smaller factor could price a step faster than the GPU's datasheet allows"
            )

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float:
        return self.factor * self.pricer.iteration_s(
            num_decodes, decode_context_tokens, prefill_chunks
        )


@dataclass(frozen=True, slots=True)
class TermScaledPricer:
    """`pricer` with each term of a step priced at its own measured pace: a step of the decodes
    alone `decode` times its price, and what the prefill chunks add to it `prefill` times.
    Never faster than the profile on either term (see ScaledPricer)."""

    pricer: StepPricer
    decode: float
    prefill: float

    def __post_init__(self) -> None:
        for name, factor in (("decode", self.decode), ("prefill", self.prefill)):
            if not (math.isfinite(factor) and factor >= 1.0):
                raise ValueError(
                    f"a step's {name} term may only be scaled up (factor >= 1), got {factor}: "
                    "a smaller factor could price a step faster than the GPU's datasheet allows"
                )

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float:
        alone_s = self.pricer.iteration_s(num_decodes, decode_context_tokens)
        if not prefill_chunks:
            return self.decode * alone_s
        with_chunks_s = self.pricer.iteration_s(num_decodes, decode_context_tokens, prefill_chunks)
        return self.decode * alone_s + self.prefill * max(0.0, with_chunks_s - alone_s)


def priced_at(pricer: StepPricer, decode: float, prefill: float) -> StepPricer:
    """`pricer` at the engines' measured pace per term; one factor for both is ScaledPricer's,
    none (both 1) the pricer itself."""
    if decode == prefill:
        return pricer if decode == 1.0 else ScaledPricer(pricer, decode)
    return TermScaledPricer(pricer, decode, prefill)


def attention_pairs(decode_context_tokens: int, prefill_chunks: Sequence[PrefillChunk]) -> int:
    """(query, key) pairs a step attends: each decode its context, each chunk causally."""
    pairs = decode_context_tokens
    for new, computed in prefill_chunks:
        pairs += new * computed + new * (new + 1) // 2
    return pairs


@dataclass(frozen=True, slots=True)
class StepWork:
    """Per-GPU work coefficients of one model shape at one tensor parallelism."""

    tensor_parallel_size: int
    flops_per_token: float
    flops_per_pair: float
    weight_bytes: float
    kv_bytes_per_token: float
    num_allreduces: int
    allreduce_bytes_per_token: float

    def flops(self, num_tokens: int, pairs: int) -> float:
        return self.flops_per_token * num_tokens + self.flops_per_pair * pairs

    def bytes_moved(self, num_tokens: int, kv_read_tokens: int) -> float:
        return self.weight_bytes + self.kv_bytes_per_token * (kv_read_tokens + num_tokens)


def step_work(shape: ModelShape, tensor_parallel_size: int) -> StepWork:
    """The work coefficients of `shape` split over `tensor_parallel_size` GPUs."""
    tp = tensor_parallel_size
    if tp < 1:
        raise InvalidSpec(f"tensorParallelSize must be at least 1, got {tp}")
    if shape.num_attention_heads % tp != 0:
        raise InvalidSpec(
            f"tensorParallelSize {tp} must divide numAttentionHeads "
            f"({shape.num_attention_heads}); choose a divisor such as 1, 2, 4 or 8"
        )
    attention_width = shape.num_layers * shape.num_attention_heads * shape.head_dim
    # KV heads split across ranks until each rank holds one; beyond that they are replicated.
    kv_bytes_per_token = shape.kv_bytes_per_token / min(tp, shape.num_kv_heads)
    # A ring all-reduce moves 2 (tp - 1) / tp of the tensor through each GPU's link.
    ring_share = 2.0 * (tp - 1) / tp
    return StepWork(
        tensor_parallel_size=tp,
        flops_per_token=2.0 * shape.num_parameters / tp,
        flops_per_pair=4.0 * attention_width / tp,
        weight_bytes=shape.weight_bytes / tp,
        kv_bytes_per_token=kv_bytes_per_token,
        num_allreduces=ALLREDUCES_PER_LAYER * shape.num_layers if tp > 1 else 0,
        allreduce_bytes_per_token=ring_share * shape.hidden_size * ACTIVATION_BYTES,
    )


def floor_s(flops: float, bytes_moved: float, peak_tflops: float, bandwidth_gbps: float) -> float:
    """Seconds at 100 % of the datasheet: the larger of the compute and the memory floor."""
    return max(flops / (peak_tflops * 1e12), bytes_moved / (bandwidth_gbps * 1e9))


def step_totals(
    num_decodes: int, decode_context_tokens: int, prefill_chunks: Sequence[PrefillChunk] = ()
) -> tuple[int, int, int]:
    """(tokens computed, attention pairs, cached KV tokens read) of one step of this mix."""
    num_tokens = num_decodes + sum(c.num_new_tokens for c in prefill_chunks)
    pairs = attention_pairs(decode_context_tokens, prefill_chunks)
    kv_read = decode_context_tokens + sum(c.num_computed_tokens for c in prefill_chunks)
    return num_tokens, pairs, kv_read


def step_floor_s(
    work: StepWork,
    peak_tflops: float,
    bandwidth_gbps: float,
    num_decodes: int,
    decode_context_tokens: int,
    prefill_chunks: Sequence[PrefillChunk] = (),
) -> float:
    """The datasheet floor of one step of this mix."""
    num_tokens, pairs, kv_read = step_totals(num_decodes, decode_context_tokens, prefill_chunks)
    return floor_s(
        work.flops(num_tokens, pairs),
        work.bytes_moved(num_tokens, kv_read),
        peak_tflops,
        bandwidth_gbps,
    )
