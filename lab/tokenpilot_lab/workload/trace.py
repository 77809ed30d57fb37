"""A trace: requests with arrival times relative to the trace start, and its duration."""

from __future__ import annotations

from dataclasses import dataclass, field


class TraceError(ValueError):
    """A trace cannot be used as given; the message names the source, the line and the fix."""

    def __init__(self, message: str, *, source: str = "", line: int | None = None) -> None:
        where = source
        if line is not None:
            where = f"{source}, line {line}" if source else f"line {line}"
        super().__init__(f"{where}: {message}" if where else message)
        self.source = source
        self.line = line


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request: when it arrives (seconds after the trace start) and its token counts."""

    arrival_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    # The trace's prefix hashes of the prompt, one per `Trace.hash_block_tokens` tokens (a
    # prefix-cache hint such as Mooncake's `hash_ids`); empty when the trace has none.
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    """Requests sorted by arrival, over [0, duration_s).

    `notes` records everything a reader should know about how the rows became requests
    (rows skipped and why, with counts and the first line), so nothing disappears silently.
    """

    name: str
    requests: tuple[TraceRequest, ...]
    duration_s: float
    notes: tuple[str, ...] = field(default=())
    # Prompt tokens each of a request's `hash_ids` stands for (Mooncake: 512); 0 without.
    hash_block_tokens: int = 0

    def __post_init__(self) -> None:
        if self.duration_s < 0:
            raise TraceError(f"duration_s must be >= 0, got {self.duration_s}", source=self.name)
        if self.requests and self.requests[-1].arrival_s > self.duration_s:
            raise TraceError(
                f"last arrival {self.requests[-1].arrival_s} s is after the duration "
                f"{self.duration_s} s",
                source=self.name,
            )

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    @property
    def has_prefix_hashes(self) -> bool:
        return self.hash_block_tokens > 0 and any(r.hash_ids for r in self.requests)

    def num_whole_windows(self, window_s: float) -> int:
        """How many whole `window_s` windows the trace spans from its start."""
        return int(self.duration_s // window_s) if window_s > 0 else 0

    def prompt_tokens_swing(self, window_s: float) -> float | None:
        """The most prompt tokens one of the trace's whole `window_s` windows (from its start)
        holds over the fewest: how much its load varies (issue 13 calls a trace flat under 2x
        in 5-minute windows). None with fewer than two whole windows, or where one is empty
        (the load varies without bound)."""
        count = self.num_whole_windows(window_s)
        if count < 2:
            return None
        tokens = [0] * count
        for req in self.requests:
            index = int(req.arrival_s // window_s)
            if index < count:
                tokens[index] += req.num_prompt_tokens
        return max(tokens) / min(tokens) if min(tokens) > 0 else None

    def peak_window_start_s(self, window_s: float) -> float:
        """Start of the `window_s` span holding the most prompt+output tokens (ties: earliest)."""
        reqs = self.requests
        if not reqs or window_s >= self.duration_s:
            return 0.0
        best_tokens, best_start = -1, 0.0
        tokens_in, lo = 0, 0
        for hi, req in enumerate(reqs):
            tokens_in += req.num_prompt_tokens + req.num_output_tokens
            while reqs[lo].arrival_s <= req.arrival_s - window_s:
                tokens_in -= reqs[lo].num_prompt_tokens + reqs[lo].num_output_tokens
                lo += 1
            if tokens_in > best_tokens:
                best_tokens = tokens_in
                best_start = max(0.0, reqs[hi].arrival_s - window_s)
        return min(best_start, max(0.0, self.duration_s - window_s))
