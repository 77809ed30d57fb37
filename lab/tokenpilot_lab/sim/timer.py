"""What the engine needs from a step-time model: the duration of one iteration."""

from __future__ import annotations

from typing import Protocol


class StepTimer(Protocol):
    """Anything that prices one forward pass, e.g. `tokenpilot.core.steptime.StepTimeModel`.

    `num_kv_tokens_read` is the number of context tokens the attention kernels read this step:
    for each scheduled sequence, the tokens already in its KV cache plus the ones it adds.
    """

    def iteration_s(
        self, num_decode_tokens: int, num_prefill_tokens: int, num_kv_tokens_read: int
    ) -> float: ...
