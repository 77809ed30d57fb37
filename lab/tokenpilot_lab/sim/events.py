"""What the engine reports: per-request events and per-step records."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RequestStats:
    """Timings of one finished request, in the engine's time base (seconds)."""

    request_id: str
    arrival_s: float
    first_scheduled_s: float
    first_token_s: float
    finish_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    # Prompt tokens the prefix cache supplied when it was first scheduled.
    num_cached_tokens: int
    finish_reason: str
    num_preemptions: int
    # Gaps between consecutive output tokens; None when the engine does not record them.
    itl_s: tuple[float, ...] | None

    @property
    def queue_s(self) -> float:
        return self.first_scheduled_s - self.arrival_s

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first (vLLM's request_time_per_output_token)."""
        if self.num_output_tokens < 2:
            return 0.0
        return (self.finish_s - self.first_token_s) / (self.num_output_tokens - 1)


@dataclass(frozen=True, slots=True)
class FirstToken:
    request_id: str
    time_s: float


@dataclass(frozen=True, slots=True)
class Finished:
    request_id: str
    time_s: float
    stats: RequestStats


@dataclass(frozen=True, slots=True)
class Preempted:
    """The request lost its KV blocks and went back to the front of the queue (recompute)."""

    request_id: str
    time_s: float


EngineEvent = FirstToken | Finished | Preempted


@dataclass(slots=True)
class StepLog:
    """One entry per step, as parallel lists (cheap to append in long runs)."""

    start_s: list[float] = field(default_factory=list)
    duration_s: list[float] = field(default_factory=list)
    num_prefill_tokens: list[int] = field(default_factory=list)
    num_decode_tokens: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.start_s)
