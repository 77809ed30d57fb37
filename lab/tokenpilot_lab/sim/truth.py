"""Engines that differ from their GPU profile: the hidden truth a simulated engine runs.

The operator plans with its GPU profile's step model (`tokenpilot.core.steptime`). Real engines
differ from any such model, and not by one scalar: per term (the host's per-step overhead, the
memory traffic, the arithmetic) and in shape (small steps computing under the rate long prompts
reach, attention slowing as the context grows). An `EngineTruth` names such differences and
prices the engines' steps with them, while the operator keeps the profile's price; what the
engines then export is what real engines under that truth would.

A truth is built on the same step model, never beside it:

- its scalar changes are a modified parameter set: the profile's compute and bandwidth
  efficiencies, per-step overhead and all-reduce latency each times a scale, and optionally its
  own overlap exponent;
- `computeEfficiencyByStepTokens` chooses the parameter set per step: the step's arithmetic
  (both kernel groups) runs at `scale(n)` times that efficiency, n the tokens the step computes
  (GEMMs of few rows fill few tensor-core tiles and SM waves);
- `attentionSlowdownByContext` modifies one term: the attention group's time times
  `slowdown(c)`, c the mean context a sequence of the step attends (its cached tokens and the
  new ones).

A curve is linear in log tokens between its points and holds its end values beyond them.

Physics first: no truth prices a step under its datasheet floor (`core.roofline.step_floor_s`).
Each kernel group takes at least the larger of its FLOPs at the achieved rate and its bytes at
the achieved bandwidth. A truth's efficiencies are checked against the profile to stay under 1
(the datasheet, which no kernel reaches, as the GPU profile's own rule says), its attention
slowdowns are at least 1, and its overhead and all-reduces cost at least nothing: every group
stays above its own floor, and their sum above the step's.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from tokenpilot.api.base import ApiModel
from tokenpilot.api.gpu_profile import FittedValue, StepModelParameters
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.roofline import PrefillChunk, StepPricer
from tokenpilot.core.steptime import StepTimeModel

# What --engine-truth accepts for engines priced as their profile prices them.
PROFILE_TRUTH = "profile"
EXAMPLE_TRUTH = "docs/fleet-simulation.md, 'Engines that differ from their profile'"


class InvalidTruth(InvalidSpec):
    """An engine truth that names no change, a field out of range, or one that would price a
    step faster than the GPU's datasheet allows; the message names the field and the fix."""


class TokensScale(ApiModel):
    """A point of `computeEfficiencyByStepTokens`: at `tokens` computed in a step, the step's
    arithmetic runs at `scale` times the efficiency."""

    tokens: int = Field(ge=1)
    scale: float = Field(gt=0, allow_inf_nan=False)


class ContextSlowdown(ApiModel):
    """A point of `attentionSlowdownByContext`: at a mean context of `contextTokens` per
    sequence, attention takes `slowdown` times the profile's time."""

    context_tokens: int = Field(ge=1)
    slowdown: float = Field(ge=1, allow_inf_nan=False)


class EngineTruth(ApiModel):
    """How the engines differ from the profile the operator holds (see the module doc)."""

    name: str = Field(min_length=1)
    stands_for: str = Field(min_length=1, description="What the difference is, physically.")
    compute_efficiency_scale: float = Field(1.0, gt=0, allow_inf_nan=False)
    bandwidth_efficiency_scale: float = Field(1.0, gt=0, allow_inf_nan=False)
    overhead_scale: float = Field(1.0, ge=0, allow_inf_nan=False)
    all_reduce_latency_scale: float = Field(1.0, ge=0, allow_inf_nan=False)
    overlap_exponent: float | None = Field(None, ge=1, allow_inf_nan=False)
    compute_efficiency_by_step_tokens: tuple[TokensScale, ...] = ()
    attention_slowdown_by_context: tuple[ContextSlowdown, ...] = ()

    @field_validator("compute_efficiency_by_step_tokens", "attention_slowdown_by_context")
    @classmethod
    def _increasing(cls, points: tuple[Any, ...]) -> tuple[Any, ...]:
        xs = [p.tokens if isinstance(p, TokensScale) else p.context_tokens for p in points]
        if any(b <= a for a, b in itertools.pairwise(xs)):
            raise ValueError(
                f"token counts {xs} do not rise: list the points in order of rising tokens, "
                "each count once"
            )
        return points

    @model_validator(mode="after")
    def _names_a_change(self) -> Self:
        if not self.changes():
            raise ValueError(
                "names no change from the profile; set at least one of computeEfficiencyScale, "
                "bandwidthEfficiencyScale, overheadScale, allReduceLatencyScale, "
                "overlapExponent, computeEfficiencyByStepTokens, attentionSlowdownByContext"
            )
        return self

    def changes(self) -> tuple[str, ...]:
        """Each change from the profile, in words."""
        out = []
        scales = (
            ("compute efficiency", self.compute_efficiency_scale),
            ("bandwidth efficiency", self.bandwidth_efficiency_scale),
            ("per-step overhead", self.overhead_scale),
            ("all-reduce latency", self.all_reduce_latency_scale),
        )
        out += [f"{what} {scale:g}x the profile's" for what, scale in scales if scale != 1.0]
        if self.overlap_exponent is not None:
            out.append(f"overlap exponent {self.overlap_exponent:g}")
        if self.compute_efficiency_by_step_tokens:
            points = ", ".join(
                f"{p.scale:g}x at {p.tokens:,}" for p in self.compute_efficiency_by_step_tokens
            )
            out.append(f"compute efficiency by the step's tokens: {points} (log-linear between)")
        if self.attention_slowdown_by_context:
            points = ", ".join(
                f"{p.slowdown:g}x at {p.context_tokens:,}"
                for p in self.attention_slowdown_by_context
            )
            out.append(f"attention by mean context: {points} (log-linear between)")
        return tuple(out)

    def describe(self) -> str:
        return f"{self.name} ({'; '.join(self.changes())})"

    def pricer(self, model: StepTimeModel) -> StepPricer:
        """The engines' step price under this truth, on the profile's step model `model`.
        Refuses a truth that would run a kernel past its datasheet on this GPU."""
        p = model.parameters
        by_tokens = self.compute_efficiency_by_step_tokens
        top_scale = max((pt.scale for pt in by_tokens), default=1.0)
        compute = p.compute_efficiency.value * self.compute_efficiency_scale
        bandwidth = p.bandwidth_efficiency.value * self.bandwidth_efficiency_scale
        if compute * top_scale >= 1.0:
            field_name = (
                "computeEfficiencyByStepTokens" if top_scale > 1.0 else "computeEfficiencyScale"
            )
            raise InvalidTruth(
                f"engine truth {self.name}: {field_name}: {model.gpu}'s compute efficiency "
                f"{p.compute_efficiency.value:g} would reach {compute * top_scale:.3g}, at or past "
                "the datasheet's FLOPS (1), which no kernel reaches; lower the scale so the "
                "product stays under 1"
            )
        if bandwidth >= 1.0:
            raise InvalidTruth(
                f"engine truth {self.name}: bandwidthEfficiencyScale: {model.gpu}'s bandwidth "
                f"efficiency {p.bandwidth_efficiency.value:g} would reach {bandwidth:.3g}, at or "
                "past the datasheet's bandwidth (1), which no kernel reaches; lower the scale so "
                "the product stays under 1"
            )
        truth_model = replace(model, parameters=self._parameters(p, compute, bandwidth))
        if not by_tokens and not self.attention_slowdown_by_context:
            return truth_model
        return ShapedPricer(
            truth_model,
            _Curve.of((pt.tokens, pt.scale) for pt in by_tokens),
            _Curve.of(
                (pt.context_tokens, pt.slowdown) for pt in self.attention_slowdown_by_context
            ),
        )

    def _parameters(
        self, p: StepModelParameters, compute: float, bandwidth: float
    ) -> StepModelParameters:
        def changed(value: FittedValue, new: float) -> FittedValue:
            if new == value.value:
                return value
            data = f"engine truth {self.name}: {new:g} where the profile has {value.value:g}"
            return value.model_copy(update={"value": new, "data": data})

        return p.model_copy(
            update={
                "compute_efficiency": changed(p.compute_efficiency, compute),
                "bandwidth_efficiency": changed(p.bandwidth_efficiency, bandwidth),
                "overhead_ms": changed(p.overhead_ms, p.overhead_ms.value * self.overhead_scale),
                "all_reduce_latency_us": changed(
                    p.all_reduce_latency_us,
                    p.all_reduce_latency_us.value * self.all_reduce_latency_scale,
                ),
                "overlap_exponent": changed(
                    p.overlap_exponent,
                    p.overlap_exponent.value
                    if self.overlap_exponent is None
                    else self.overlap_exponent,
                ),
            }
        )


@dataclass(frozen=True, slots=True)
class _Curve:
    """A factor by a token count: linear in log tokens between points, flat beyond them."""

    log_tokens: tuple[float, ...]
    factors: tuple[float, ...]

    @staticmethod
    def of(points: Any) -> _Curve | None:
        pairs = tuple(points)
        if not pairs:
            return None
        return _Curve(tuple(math.log(x) for x, _ in pairs), tuple(f for _, f in pairs))

    def at(self, tokens: float) -> float:
        xs, fs = self.log_tokens, self.factors
        x = math.log(tokens) if tokens > 0 else -math.inf
        if x <= xs[0]:
            return fs[0]
        if x >= xs[-1]:
            return fs[-1]
        i = bisect.bisect_right(xs, x)
        share = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        return fs[i - 1] + share * (fs[i] - fs[i - 1])


@dataclass(frozen=True, slots=True)
class ShapedPricer:
    """The truth's step model with its shapes: the parameter set chosen by the step's tokens,
    then the attention term slowed by the step's mean context."""

    model: StepTimeModel
    compute_by_tokens: _Curve | None
    attention_by_context: _Curve | None
    _by_tokens: dict[int, StepTimeModel] = field(default_factory=dict, compare=False, repr=False)

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float:
        overhead_s, linear_s, attention_s, allreduce_s = self.terms_s(
            num_decodes, decode_context_tokens, prefill_chunks
        )
        return overhead_s + linear_s + attention_s + allreduce_s

    def terms_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> tuple[float, float, float, float]:
        """As `StepTimeModel.terms_s`: overhead, linear layers, attention, all-reduces."""
        model = self.model
        if self.compute_by_tokens is not None:
            num_tokens = num_decodes + sum(c.num_new_tokens for c in prefill_chunks)
            model = self._model_at(num_tokens)
        overhead_s, linear_s, attention_s, allreduce_s = model.terms_s(
            num_decodes, decode_context_tokens, prefill_chunks
        )
        if self.attention_by_context is not None:
            num_sequences = num_decodes + len(prefill_chunks)
            if num_sequences:
                context = decode_context_tokens + sum(
                    c.num_new_tokens + c.num_computed_tokens for c in prefill_chunks
                )
                attention_s *= self.attention_by_context.at(context / num_sequences)
        return overhead_s, linear_s, attention_s, allreduce_s

    def _model_at(self, num_tokens: int) -> StepTimeModel:
        model = self._by_tokens.get(num_tokens)
        if model is None:
            assert self.compute_by_tokens is not None
            p = self.model.parameters
            efficiency = p.compute_efficiency.value * self.compute_by_tokens.at(num_tokens)
            value = p.compute_efficiency.model_copy(update={"value": efficiency})
            model = replace(
                self.model, parameters=p.model_copy(update={"compute_efficiency": value})
            )
            self._by_tokens[num_tokens] = model
        return model


BUILTIN_TRUTHS: Mapping[str, EngineTruth] = {
    truth.name: truth
    for truth in (
        EngineTruth(
            name="chunk-compute",
            stands_for=(
                "compute efficiency rising with the step's size: a GEMM of few rows fills few "
                "of the tensor cores' tiles and of the SMs' waves, so a step of a few hundred "
                "tokens computes well under the rate of the long prompts the profile's "
                "efficiency was fitted on (Splitwise's 2,048 and 8,192 tokens), and a step of "
                "2,048 or more at it"
            ),
            compute_efficiency_by_step_tokens=(
                TokensScale(tokens=128, scale=0.55),
                TokensScale(tokens=512, scale=0.75),
                TokensScale(tokens=2048, scale=1.0),
            ),
        ),
        EngineTruth(
            name="launch-overhead",
            stands_for=(
                "per-step host work 1.3x the profile's: the scheduler, input preparation, "
                "sampling and kernel launches outside CUDA graphs on a slower or busier host "
                "CPU than the engines the overhead was fitted on"
            ),
            overhead_scale=1.3,
        ),
        EngineTruth(
            name="long-context-attention",
            stands_for=(
                "attention slowing with the context: paged attention gathers a long KV cache "
                "from scattered 16-token blocks, splits it into partitions whose partial "
                "results it reduces, and misses L2 more, so at 32K tokens of context it takes "
                "1.4x the profile's time, at 4K and below the profile's"
            ),
            attention_slowdown_by_context=(
                ContextSlowdown(context_tokens=4096, slowdown=1.0),
                ContextSlowdown(context_tokens=32768, slowdown=1.4),
            ),
        ),
        EngineTruth(
            name="memory-bandwidth",
            stands_for=(
                "HBM at 0.85x the bandwidth the profile achieves: a power-capped or hot board "
                "whose memory clock drops, or a variant with slower memory than the one the "
                "profile was fitted on; every weight and KV read takes 1/0.85 as long"
            ),
            bandwidth_efficiency_scale=0.85,
        ),
    )
}


def builtin_truth(name: str) -> EngineTruth | None:
    """The built-in truth of this name; None for `profile` (engines at the profile's price)."""
    if name == PROFILE_TRUTH:
        return None
    try:
        return BUILTIN_TRUTHS[name]
    except KeyError:
        raise InvalidTruth(
            f"unknown engine truth {name!r}; use {PROFILE_TRUTH}, one of "
            f"{', '.join(BUILTIN_TRUTHS)}, or a YAML file naming the changes ({EXAMPLE_TRUTH})"
        ) from None


def parse_truth(text: str, source: str) -> EngineTruth:
    """One engine truth from YAML; every error names `source`, the field and the fix."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidTruth(f"{source}: not valid YAML ({exc}); fix the syntax") from None
    if not isinstance(data, dict):
        raise InvalidTruth(
            f"{source}: an engine truth is a YAML mapping with name, standsFor and the changes "
            f"(such as overheadScale: 1.3); see {EXAMPLE_TRUTH}"
        )
    try:
        return EngineTruth.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: invalid engine truth"]
        lines += [f"  {_field(e['loc'])}: {_fix(e)}" for e in exc.errors()]
        raise InvalidTruth("\n".join(lines)) from None


def _field(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            head, *rest = str(part).split("_")
            path += ("." if path else "") + head + "".join(p.title() for p in rest)
    return path or "(document)"


def _fix(error: Mapping[str, Any]) -> str:
    kind = str(error["type"])
    if kind == "missing":
        return "missing; add it (name and standsFor are required)"
    if kind == "extra_forbidden":
        return (
            "unknown field; remove it or fix its spelling (fields are camelCase: "
            f"{', '.join(_field((f,)) for f in EngineTruth.model_fields)})"
        )
    message = str(error["msg"]).removeprefix("Value error, ")
    return message if kind == "value_error" else f"{message} (got {error.get('input')!r})"
