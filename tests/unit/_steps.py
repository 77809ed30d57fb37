"""A step pricer for unit tests that need an engine but not a GPU: a fixed cost per step plus a
cost per decode and per prefill token (core.roofline.StepPricer)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenpilot.core.roofline import PrefillChunk


@dataclass(frozen=True)
class LinearStep:
    base_s: float = 0.008
    per_decode_s: float = 0.0001
    per_prefill_token_s: float = 0.00002

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float:
        return (
            self.base_s
            + self.per_decode_s * num_decodes
            + self.per_prefill_token_s * sum(c.num_new_tokens for c in prefill_chunks)
        )
