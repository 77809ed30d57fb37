"""What the engine needs from a step-time model: the duration of one iteration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tokenpilot.core.roofline import PrefillChunk


class StepTimer(Protocol):
    """Anything that prices one forward pass, e.g. `tokenpilot.core.steptime.StepTimeModel`.

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
