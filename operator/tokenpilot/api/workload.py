"""The workload an LLMService serves and what its engines cost, as the API states them: the hints
a user may give (`spec.workload`), what the operator learned from the engines' own metrics
(`status.workload`, `status.engineCosts`), and how it may re-tune the token budget on them
(`spec.batching.retune`, `status.tuning.recommendation`)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator

from tokenpilot.api.base import ApiModel


class WorkloadSpec(ApiModel):
    """What the user knows of the traffic before the engines have served any: the tuner plans
    for these until the observed figures rest on enough requests."""

    prompt_tokens_p99: int | None = Field(None, ge=1, description="P99 prompt length in tokens.")
    mean_context_tokens: int | None = Field(
        None,
        ge=1,
        description="Mean context a decode attends, in tokens (its prompt and half its output).",
    )


class PlannedFor(ApiModel):
    """The workload and the step costs a token budget was planned for."""

    prompt_tokens_p99: int | None = Field(None, description="P99 prompt length in tokens.")
    mean_context_tokens: int | None = Field(None, description="Mean context of a decode.")
    # A disaggregated service's prefill chunk is planned for the mean prompt and its pools for
    # the mean output (core.disaggregation_plan); an aggregated service's plan leaves them out.
    mean_prompt_tokens: int | None = Field(None, description="Mean prompt length in tokens.")
    mean_output_tokens: int | None = Field(None, description="Mean output length in tokens.")
    decode_step_factor: float = Field(
        1.0, description="Decode-only steps priced at this times the profile's price."
    )
    prefill_factor: float = Field(
        1.0, description="Prefill beside the decodes priced at this times the profile's price."
    )


class RetuneMode(StrEnum):
    """What the operator does when the learned workload moves the tuner's recommendation."""

    Auto = "Auto"  # roll the engines to the new budget, within the rules (docs/tuning.md)
    Advise = "Advise"  # publish the recommendation and its predicted gain; roll nothing
    Off = "Off"  # keep the budget chosen at creation (or on a spec or profile change)


DEFAULT_RETUNE = RetuneMode.Auto
DEFAULT_RETUNE_COOLDOWN = "1h"


class TokenFigures(ApiModel):
    """A token count per request, read from the engines' histograms: the mean (exact, from
    the sums) and the P99 as the upper edge of the bucket that holds it, with that bucket's
    width over its edge (the P99 is within this share below the figure)."""

    mean: float = Field(description="Mean per request (sum over count: exact).")
    p99: float = Field(description="P99 per request: the upper edge of its bucket.")
    p99_resolution: float = Field(
        description="How far below `p99` the exact P99 may lie, as a share of it."
    )


class WorkloadStatus(ApiModel):
    """The traffic the engines served over the last `windowSeconds`, from their own metrics
    (written by the autoscaler)."""

    window_seconds: float = Field(description="Span the figures cover.")
    requests: int = Field(description="Requests finished in the window, behind every figure.")
    prompt_tokens: TokenFigures | None = Field(None, description="Prompt tokens per request.")
    output_tokens: TokenFigures | None = Field(None, description="Output tokens per request.")
    mean_context_tokens: float | None = Field(
        None, description="Mean context a decode attends: mean prompt plus half the output."
    )
    arrival_rate_per_second: float = Field(description="Requests per second over the window.")
    prefix_cache_hit_rate: float | None = Field(
        None, description="Prompt tokens found in the prefix cache, over those queried."
    )
    observed_at: str = Field(description="When (RFC 3339).")


class TermCost(ApiModel):
    """One term of the step's cost as the engines showed it, over the model's price of it."""

    factor: float = Field(description="Measured over priced (1: as the GPU profile prices it).")
    uncertainty: float = Field(description="One-sided 99 % bound on the factor's error, +/-.")
    readings: int = Field(description="Intervals it rests on.")


class EngineCostsStatus(ApiModel):
    """What the engines' steps cost, term by term, against the step model (written by the
    autoscaler): a decode-only step, and the prefill tokens beside the decodes."""

    window_seconds: float = Field(description="Span the readings cover.")
    decode_step: TermCost | None = Field(None, description="A step of decodes alone.")
    prefill: TermCost | None = Field(None, description="The prefill tokens beside the decodes.")


class TuningBasis(StrEnum):
    """What the tuner planned for."""

    spec = "Spec"  # the spec's own integers: nothing to plan
    observed = "Observed"  # the workload the engines served (status.workload)
    hints = "Hints"  # spec.workload
    defaults = "Defaults"  # neither: the API's defaults


class RetuneRecommendation(ApiModel):
    """A budget the learned workload calls for that the engines do not run yet, and why."""

    max_num_batched_tokens: int = Field(description="The budget recommended.")
    max_num_seqs: int = Field(description="The max_num_seqs recommended.")
    predicted_gain: float = Field(
        description="Predicted capacity per GPU at the SLOs, over the running budget's."
    )
    state: str = Field(
        description="Advised (retune Advise), or Waiting and why (retune Auto, held by a gate)."
    )
    reason: str = Field(description="Why, in words.")

    @field_validator("predicted_gain")
    @classmethod
    def _positive(cls, value: float) -> float:
        if not value > 0:
            raise ValueError("predictedGain must be > 0")
        return value
