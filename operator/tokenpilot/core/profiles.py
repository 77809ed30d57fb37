"""GPU profiles: what a SKU offers (memory, bandwidth, compute, price) and what was measured on it.

A profile is one YAML document (`policies/gpus/*.yaml` for the built-ins, ConfigMap keys for a
cluster's own). This module only parses text and merges catalogs; reading files and ConfigMaps is
`tokenpilot.adapters.profiles`. Units are in the field names (`memoryGib`, `hbmBandwidthGbps`,
`stepMs`); a value written with a unit suffix, or one that is plausible only in another unit, is
refused with a message that names the file, the field and the fix.

Merge rule: a cluster profile replaces the built-in of the same SKU, and measured interference
data is never lost to a profile without it (a measured profile always wins over a built-in one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Self

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from tokenpilot.api.base import ApiModel
from tokenpilot.api.model_shape import MODEL_PRESETS
from tokenpilot.core.errors import InvalidSpec, UnknownGPU

EXAMPLE_PROFILE = "policies/gpus/h100-80gb.yaml"


class Provenance(ApiModel):
    """Where measured figures come from, so a reader can judge and reproduce them."""

    source: str = Field(min_length=1, description="Document or run the figures come from.")
    model: str = Field(description="Model preset measured, e.g. llama-3.1-8b.")
    engine: str = Field(min_length=1, description="Serving engine and version, e.g. vLLM V1.")
    scheduler: str | None = Field(None, description="Scheduling policy, e.g. FCFS.")
    date: str | None = Field(None, description="When it was measured (ISO date) if known.")
    notes: str | None = None

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in MODEL_PRESETS:
            known = ", ".join(sorted(MODEL_PRESETS))
            raise ValueError(f"unknown model preset {value!r}; use one of: {known}")
        return value


class DecodeStep(ApiModel):
    """A pure-decode iteration time at a decode concurrency."""

    num_decode: int = Field(gt=0)
    step_ms: float = Field(gt=0)

    @field_validator("step_ms")
    @classmethod
    def _milliseconds(cls, value: float) -> float:
        return _check_ms(value)


class MixedStep(ApiModel):
    """Mean iteration time while a burst of prefills runs beside `num_decode` decodes."""

    num_decode: int = Field(ge=0)
    num_prefill: int = Field(gt=0)
    prefill_len: int = Field(gt=0)
    baseline_ms: float = Field(gt=0)
    mixed_ms: float = Field(gt=0)

    @field_validator("baseline_ms", "mixed_ms")
    @classmethod
    def _milliseconds(cls, value: float) -> float:
        return _check_ms(value)

    @property
    def num_prefill_tokens(self) -> int:
        return self.num_prefill * self.prefill_len


class HeatmapCell(ApiModel):
    """Interference of one burst shape; `upperBound` marks cells the study gives as "<x%"."""

    num_prefill: int = Field(gt=0)
    prefill_len: int = Field(gt=0)
    interference_pct: float = Field(ge=0)
    upper_bound: bool = False

    @property
    def num_prefill_tokens(self) -> int:
        return self.num_prefill * self.prefill_len


class Heatmap(ApiModel):
    """Interference by burst shape at one decode concurrency."""

    num_decode: int = Field(gt=0)
    baseline_ms: float = Field(gt=0)
    cells: tuple[HeatmapCell, ...] = Field(min_length=1)

    @field_validator("baseline_ms")
    @classmethod
    def _milliseconds(cls, value: float) -> float:
        return _check_ms(value)


class MeasuredInterference(ApiModel):
    """Prefill-decode interference measured on this SKU, with its provenance."""

    provenance: Provenance
    threshold_prefill_tokens: int = Field(
        gt=0, description="Prefill tokens per step beyond which decode steps jump."
    )
    decode_steps: tuple[DecodeStep, ...] = Field(min_length=1)
    mixed_steps: tuple[MixedStep, ...] = ()
    heatmap: Heatmap | None = None


class GPUProfile(ApiModel):
    """One GPU SKU: identity, datasheet figures, price, and measured interference if any."""

    name: str = Field(min_length=1, description="Canonical SKU name, e.g. H100-80GB.")
    aliases: tuple[str, ...] = ()
    gpu_product_labels: tuple[str, ...] = Field(
        min_length=1, description="nvidia.com/gpu.product values (GPU feature discovery)."
    )
    architecture: str = Field(min_length=1)
    memory_gib: float = Field(gt=0, description="Device memory as the driver reports it, GiB.")
    hbm_bandwidth_gbps: float = Field(gt=0, description="Peak memory bandwidth, GB/s.")
    bf16_dense_tflops: float = Field(gt=0, description="Dense BF16 (or FP16) tensor TFLOPS.")
    hourly_cost_usd: float = Field(ge=0, description="On-demand price per GPU-hour, USD.")
    hourly_cost_source: str = Field(min_length=1)
    datasheet_source: str = Field(min_length=1)
    measured: MeasuredInterference | None = None
    notes: str | None = None

    @field_validator("memory_gib")
    @classmethod
    def _gib(cls, value: float) -> float:
        if value > 1024:
            raise ValueError(
                f"{value} GiB is implausible for one GPU; the unit is GiB (write 80, not 81920)"
            )
        return value

    @field_validator("hbm_bandwidth_gbps")
    @classmethod
    def _gbps(cls, value: float) -> float:
        if value < 50:
            raise ValueError(
                f"{value} GB/s is implausibly low; the unit is GB/s, so a figure in TB/s such "
                f"as 3.35 must be written 3350"
            )
        return value

    @field_validator("bf16_dense_tflops")
    @classmethod
    def _tflops(cls, value: float) -> float:
        if value > 20_000:
            raise ValueError(
                f"{value} TFLOPS is implausible; the unit is TFLOPS (write 989, not 989000)"
            )
        return value

    @model_validator(mode="after")
    def _labels_look_like_gfd(self) -> Self:
        for label in self.gpu_product_labels:
            if " " in label:
                raise ValueError(
                    f"gpuProductLabels: {label!r} contains a space; GPU feature discovery "
                    f"writes dashes, e.g. {label.replace(' ', '-')!r}"
                )
        return self

    @property
    def is_measured(self) -> bool:
        return self.measured is not None

    @property
    def keys(self) -> tuple[str, ...]:
        """Every spelling that identifies this SKU, normalised for lookup."""
        return tuple(
            dict.fromkeys(
                normalise_key(k) for k in (self.name, *self.aliases, *self.gpu_product_labels)
            )
        )


_UNIT_SUFFIX = re.compile(r"^\s*[-+]?[0-9.]+\s*[A-Za-z/%]+\s*$")


def _check_ms(value: float) -> float:
    if value < 0.5:
        raise ValueError(
            f"{value} ms is implausibly short for a model step; the unit is milliseconds "
            f"(write 8.4, not 0.0084)"
        )
    return value


def normalise_key(text: str) -> str:
    """Case, spaces and underscores do not distinguish SKUs: `h100 80gb` finds H100-80GB."""
    return re.sub(r"[\s_]+", "-", text.strip()).lower()


def parse_profile(text: str, source: str) -> GPUProfile:
    """Parse one profile document; every error names `source`, the field and the fix."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidSpec(f"{source}: not valid YAML ({exc}); fix the syntax") from None
    if not isinstance(data, dict):
        raise InvalidSpec(
            f"{source}: a GPU profile must be a YAML mapping with fields such as name, "
            f"memoryGib and hbmBandwidthGbps; see {EXAMPLE_PROFILE}"
        )
    try:
        return GPUProfile.model_validate(data)
    except ValidationError as exc:
        raise InvalidSpec(_explain(exc, source)) from None


def _explain(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid GPU profile"]
    for error in exc.errors():
        field = _field_path(error["loc"])
        lines.append(f"  {field}: {_fix(error, field)}")
    return "\n".join(lines)


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + _camel(part)
    return path or "(document)"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _fix(error: Mapping[str, Any], field: str) -> str:
    kind = str(error["type"])
    value = error.get("input")
    leaf = field.rsplit(".", 1)[-1]
    if kind == "missing":
        return f"missing; add `{leaf}: ...` (see {EXAMPLE_PROFILE} for every field)"
    if kind == "extra_forbidden":
        return "unknown field; remove it or fix its spelling (fields are camelCase)"
    if isinstance(value, str) and _UNIT_SUFFIX.match(value):
        return (
            f"{value!r} has a unit in the value; write a plain number in the unit the field "
            f"name states ({_unit_of(leaf)})"
        )
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{message} (got {value!r})" if kind != "value_error" else message


def _unit_of(leaf: str) -> str:
    for suffix, unit in (
        ("Gib", "GiB"),
        ("Gbps", "GB/s"),
        ("Tflops", "TFLOPS"),
        ("Usd", "US dollars"),
        ("Ms", "milliseconds"),
        ("Pct", "percent"),
        ("Tokens", "tokens"),
    ):
        if leaf.endswith(suffix):
            return f"{leaf} is in {unit}"
    return "see the field's description"


class ProfileCatalog:
    """Profiles by name, alias and product label; lookups that miss list what is known."""

    __slots__ = ("_by_key", "_profiles")

    def __init__(self, profiles: Iterable[GPUProfile]) -> None:
        self._profiles: tuple[GPUProfile, ...] = tuple(sorted(profiles, key=lambda p: p.name))
        self._by_key: dict[str, GPUProfile] = {}
        for profile in self._profiles:
            for key in profile.keys:
                other = self._by_key.get(key)
                if other is not None and other.name != profile.name:
                    raise InvalidSpec(
                        f"GPU profiles {other.name} and {profile.name} both claim {key!r}; "
                        f"remove it from one of their names, aliases or gpuProductLabels"
                    )
                self._by_key[key] = profile

    @property
    def profiles(self) -> tuple[GPUProfile, ...]:
        return self._profiles

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self._profiles)

    def __len__(self) -> int:
        return len(self._profiles)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and normalise_key(name) in self._by_key

    def get(self, name: str) -> GPUProfile:
        """The profile for a SKU name, alias or nvidia.com/gpu.product value."""
        profile = self._by_key.get(normalise_key(name))
        if profile is None:
            raise UnknownGPU(
                f"unknown GPU {name!r}; known GPUs: {', '.join(self.names)}; add a profile "
                f"for it (same format as {EXAMPLE_PROFILE}) to the GPU profiles ConfigMap"
            )
        return profile

    def by_product_label(self, label: str) -> GPUProfile:
        """The profile for a node's nvidia.com/gpu.product label value."""
        return self.get(label)


def merge_catalogs(
    builtin: ProfileCatalog, overrides: ProfileCatalog | Iterable[GPUProfile]
) -> ProfileCatalog:
    """Built-ins, with each override replacing the built-in it names.

    An override matches a built-in when they share a name, alias or product label. The override
    wins; if it carries no measurements and the built-in does, the built-in's measurements are
    kept, so measured data always wins over datasheet-only data.
    """
    override_list = overrides.profiles if isinstance(overrides, ProfileCatalog) else overrides
    merged: dict[str, GPUProfile] = {p.name: p for p in builtin.profiles}
    for override in override_list:
        keys = set(override.keys)
        replaced = [p for p in merged.values() if keys & set(p.keys)]
        measured = override.measured
        for old in replaced:
            del merged[old.name]
            if measured is None and old.measured is not None:
                measured = old.measured
        merged[override.name] = (
            override
            if measured is override.measured
            else override.model_copy(update={"measured": measured})
        )
    return ProfileCatalog(merged.values())
