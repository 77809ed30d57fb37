"""A request as the engine sees it (token counts, no text) and its mutable sequence state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokenpilot.core.errors import TokenPilotError

if TYPE_CHECKING:
    from tokenpilot_lab.sim.kv_cache import CachedUnit


class InvalidRequest(TokenPilotError, ValueError):
    """A request the engine cannot serve, naming the field and the limit."""


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One generation request.

    The engine generates exactly `num_output_tokens` tokens and then finishes with
    `finish_reason` ("length" when the caller ran to max_tokens, "stop" for a stand-in EOS).
    """

    request_id: str
    num_prompt_tokens: int
    num_output_tokens: int
    finish_reason: str = "length"
    # What the prefix cache knows of the prompt: chained hashes of its consecutive chunks of
    # `hash_block_tokens` tokens (see `tokenpilot_lab.sim.prefix`); the last chunk may be
    # shorter. Empty: the prompt shares nothing with any other.
    block_hashes: tuple[int, ...] = ()
    hash_block_tokens: int = 16
    # Prompt tokens whose KV arrives computed from a prefill engine (a disaggregated service's
    # hand-off): they cost no step, only KV blocks, unless the sequence is preempted and must
    # recompute them. At most the prompt less one token, which the engine computes for logits.
    num_handed_over_tokens: int = 0

    def __post_init__(self) -> None:
        if self.num_prompt_tokens < 1:
            raise InvalidRequest(
                f"request {self.request_id}: num_prompt_tokens must be at least 1, "
                f"got {self.num_prompt_tokens}"
            )
        if self.num_output_tokens < 1:
            raise InvalidRequest(
                f"request {self.request_id}: num_output_tokens must be at least 1, "
                f"got {self.num_output_tokens}"
            )
        if not 0 <= self.num_handed_over_tokens < self.num_prompt_tokens:
            raise InvalidRequest(
                f"request {self.request_id}: num_handed_over_tokens must be in [0, "
                f"num_prompt_tokens - 1], got {self.num_handed_over_tokens}"
            )
        if self.hash_block_tokens < 1:
            raise InvalidRequest(
                f"request {self.request_id}: hash_block_tokens must be at least 1, "
                f"got {self.hash_block_tokens}"
            )


class Sequence:
    """Scheduler state of one request. Mutable and private to the engine.

    `num_tokens` is prompt plus tokens sampled so far; `num_computed_tokens` is how many of
    them are in the KV cache. A step that brings the two level samples a token.
    """

    __slots__ = (
        "arrival_s",
        "block_hashes",
        "blocks_per_hash",
        "finish_reason",
        "first_scheduled_s",
        "first_token_s",
        "held_units",
        "itl_s",
        "last_token_s",
        "num_blocks",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_handed_over_tokens",
        "num_output_target",
        "num_output_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "num_shared_blocks",
        "request_id",
    )

    def __init__(
        self, request: SimRequest, arrival_s: float, record_itl: bool, blocks_per_hash: int = 1
    ) -> None:
        self.request_id = request.request_id
        self.num_prompt_tokens = request.num_prompt_tokens
        self.num_output_target = request.num_output_tokens
        self.finish_reason = request.finish_reason
        self.arrival_s = arrival_s
        self.num_computed_tokens = 0
        self.num_handed_over_tokens = request.num_handed_over_tokens
        self.num_output_tokens = 0
        # KV blocks: all of them, and those in prefix-cache units it holds (`held_units`, a
        # prefix of its prompt's units; see kv_cache.BlockPool). The rest are its own.
        self.num_blocks = 0
        self.num_shared_blocks = 0
        self.held_units: list[CachedUnit] = []
        self.block_hashes = request.block_hashes
        self.blocks_per_hash = blocks_per_hash
        # Prompt tokens found in the prefix cache when first scheduled (None: not yet).
        self.num_cached_tokens: int | None = None
        self.num_preemptions = 0
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s = 0.0
        self.itl_s: list[float] | None = [] if record_itl else None

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens
