"""The batching decision as data: the token budget and max_num_seqs one service runs with, where
they came from, and the bounds that set them.

It is made once per reconcile (`core.render_plan.choose_batching`, which asks `core.tuner`
unless the spec sets both integers). Render puts it on the `vllm serve` command line, status
and Events publish it (`core.status.tuning_status`, `core.events`), the autoscaler exports the
budget as a metric from the status, and `tokenpilot plan` prints the tuner's.
Bounds are values (a kind, tokens and words), so a reader asks `set_by.kind`, never the words.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenpilot.api.llmservice import BatchingSource, BoundKind, SeqsSource


@dataclass(frozen=True, slots=True)
class Bound:
    """A bound on the token budget (or the rule that picked it): what, where, and why in words."""

    kind: BoundKind
    tokens: int
    words: str


@dataclass(frozen=True, slots=True)
class BatchingDecision:
    """What the engine runs with. `lower` and `upper` are the tuner's bounds (None when the
    spec sets both integers and the tuner is not asked); `problem` says which SLOs collide and
    what to change, None when they can all be met."""

    token_budget: int
    max_num_seqs: int
    source: BatchingSource
    set_by: Bound
    max_num_seqs_source: SeqsSource
    max_num_seqs_words: str
    lower: Bound | None = None
    upper: Bound | None = None
    problem: str | None = None
    # Which measured profile the tuner priced steps on, when `tokenpilot calibrate` made it.
    calibrated_profile: str | None = None

    @property
    def feasible(self) -> bool:
        return self.problem is None

    @property
    def reason(self) -> str:
        """One paragraph for status and Events: the problem first when there is one."""
        words = (
            self.set_by.words if self.problem is None else f"{self.problem}; {self.set_by.words}"
        )
        if self.calibrated_profile is not None:
            words += f"; on the {self.calibrated_profile}"
        return words


def spec_decision(token_budget: int, max_num_seqs: int) -> BatchingDecision:
    """Both integers are in the spec: they win, and the tuner is not asked."""
    return BatchingDecision(
        token_budget=token_budget,
        max_num_seqs=max_num_seqs,
        source=BatchingSource.spec,
        set_by=Bound(BoundKind.spec, token_budget, "maxNumBatchedTokens is set in the spec"),
        max_num_seqs_source=SeqsSource.spec,
        max_num_seqs_words="maxNumSeqs is set in the spec",
    )
