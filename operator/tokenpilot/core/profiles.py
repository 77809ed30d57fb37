"""GPU profiles: what a SKU offers (memory, bandwidth, compute, price) and what was measured on it.

A profile is one YAML document (`policies/gpus/*.yaml` for the built-ins, ConfigMap keys for a
cluster's own), of the types in `tokenpilot.api.gpu_profile`. This module only parses text and
merges catalogs; reading files and ConfigMaps is `tokenpilot.adapters.profiles`. Units are in
the field names (`memoryGib`, `hbmBandwidthGbps`, `stepMs`); a value written with a unit
suffix, or one that is plausible only in another unit, is refused with a message that names the
file, the field and the fix.

A profile has three parts:
  - the datasheet (memory, peak bandwidth, dense BF16 FLOPS, interconnect) and the price;
  - `stepModel`: the step-time model's parameters (compute and bandwidth efficiency, the
    overlap exponent of the smooth roofline, per-step overhead, all-reduce latency), each with
    its basis (fitted, inherited, default) and the data it came from, so a calibration run can
    write its own fit with its provenance;
  - `measured`: step times measured on the SKU, with provenance, and the prefill threshold the
    tuner never exceeds. A measurement faster than the datasheet allows (its physical floor,
    `tokenpilot.core.roofline`) is refused with the file, the cell and the floor: no GPU can
    run a step faster than its peak FLOPS and bandwidth.

Merge rule: a cluster profile replaces the built-in of the same SKU; measured data and step-model
parameters are never lost to a profile without them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from tokenpilot.api.gpu_profile import GPUProfile, normalise_key
from tokenpilot.api.model_shape import MODEL_PRESETS
from tokenpilot.core.errors import InvalidSpec, UnknownGPU
from tokenpilot.core.roofline import PrefillChunk, step_floor_s, step_work

EXAMPLE_PROFILE = "policies/gpus/h100-80gb.yaml"


_UNIT_SUFFIX = re.compile(r"^\s*[-+]?[0-9.]+\s*[A-Za-z/%]+\s*$")


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
        profile = GPUProfile.model_validate(data)
    except ValidationError as exc:
        raise InvalidSpec(_explain(exc, source)) from None
    refused = measurements_under_floor(profile)
    if refused:
        raise InvalidSpec(
            "\n".join(
                [
                    f"{source}: measurements faster than the datasheet allows (no GPU runs a "
                    f"step faster than 100 % of its peak FLOPS and bandwidth); remove them, or "
                    f"check their units and the model they were taken on:",
                    *(f"  {line}" for line in refused),
                ]
            )
        )
    return profile


def measurements_under_floor(profile: GPUProfile) -> list[str]:
    """Each measured time under its physical floor, as `field (what): measured < floor`.

    A mixed time is the mean of the steps that carried a burst's prefill; the most favourable
    schedule puts each prompt (up to the threshold) in its own step beside the decodes, so that
    step's floor bounds the mean from below. Contexts not given count as one token.
    """
    measured = profile.measured
    if measured is None:
        return []
    tp = measured.tensor_parallel_size
    model = measured.provenance.model
    work = step_work(MODEL_PRESETS[model], tp)
    where = (
        f"for {model} at tensor parallelism {tp} on {profile.name} "
        f"({profile.bf16_dense_tflops:g} TFLOPS, {profile.hbm_bandwidth_gbps:g} GB/s)"
    )

    def floor_ms(num_decodes: int, context_tokens: int, prompt_tokens: int = 0) -> float:
        chunks = (
            (PrefillChunk(min(prompt_tokens, measured.threshold_prefill_tokens)),)
            if prompt_tokens
            else ()
        )
        return 1e3 * step_floor_s(
            work,
            profile.bf16_dense_tflops,
            profile.hbm_bandwidth_gbps,
            num_decodes,
            num_decodes * context_tokens,
            chunks,
        )

    refused: list[str] = []

    def check(field: str, what: str, measured_ms: float, floor: float) -> None:
        if measured_ms < floor:
            refused.append(
                f"measured.{field} ({what}): {measured_ms:.1f} ms is under the floor of "
                f"{floor:.1f} ms {where}"
            )

    for i, step in enumerate(measured.decode_steps):
        context = step.context_tokens or 1
        check(
            f"decodeSteps[{i}]",
            f"{step.num_decode} decodes",
            step.step_ms,
            floor_ms(step.num_decode, context),
        )
    for i, row in enumerate(measured.mixed_steps):
        burst = f"{row.num_prefill} x {row.prefill_len} prefill beside {row.num_decode} decodes"
        check(f"mixedSteps[{i}].baselineMs", burst, row.baseline_ms, floor_ms(row.num_decode, 1))
        check(
            f"mixedSteps[{i}].mixedMs",
            f"{burst}, even with each prompt in its own step",
            row.mixed_ms,
            floor_ms(row.num_decode, 1, row.prefill_len),
        )
    heatmap = measured.heatmap
    if heatmap is not None:
        check(
            "heatmap.baselineMs",
            f"{heatmap.num_decode} decodes",
            heatmap.baseline_ms,
            floor_ms(heatmap.num_decode, 1),
        )
        for i, cell in enumerate(heatmap.cells):
            mixed_ms = heatmap.baseline_ms * (1 + cell.interference_pct / 100)
            bound = "under " if cell.upper_bound else ""
            check(
                f"heatmap.cells[{i}]",
                f"{cell.num_prefill} x {cell.prefill_len} prefill beside {heatmap.num_decode} "
                f"decodes, {bound}+{cell.interference_pct:g} % of {heatmap.baseline_ms:g} ms, "
                f"even with each prompt in its own step",
                mixed_ms,
                floor_ms(heatmap.num_decode, 1, cell.prefill_len),
            )
    return refused


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


# Where a missing profile goes depends on who loaded the catalog; the loaders say (see
# adapters/profiles.py), and this is the fallback.
HOW_TO_ADD = f"add a profile for it (same format as {EXAMPLE_PROFILE})"


class ProfileCatalog:
    """Profiles by name, alias and product label; lookups that miss list what is known and
    `how_to_add` a profile where this catalog came from."""

    __slots__ = ("_by_key", "_profiles", "how_to_add")

    def __init__(self, profiles: Iterable[GPUProfile], how_to_add: str = HOW_TO_ADD) -> None:
        self.how_to_add = how_to_add
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
        key = normalise_key(name)
        profile = self._by_key.get(key)
        if profile is not None:
            return profile
        # A family name such as A100 stands for several SKUs: name them rather than guess.
        family = [p.name for p in self._profiles if normalise_key(p.name).startswith(f"{key}-")]
        if len(family) > 1:
            raise UnknownGPU(
                f"GPU {name!r} is ambiguous: it could be {' or '.join(family)}; write one of them",
                how_to_add=self.how_to_add,
                choices=tuple(family),
            )
        raise UnknownGPU(
            f"unknown GPU {name!r} (known: {', '.join(self.names)}); {self.how_to_add}",
            how_to_add=self.how_to_add,
        )

    def by_product_label(self, label: str) -> GPUProfile:
        """The profile for a node's nvidia.com/gpu.product label value."""
        return self.get(label)


def merge_catalogs(
    builtin: ProfileCatalog, overrides: ProfileCatalog | Iterable[GPUProfile]
) -> ProfileCatalog:
    """Built-ins, with each override replacing the built-in it names.

    An override matches a built-in when they share a name, alias or product label. The override
    wins; if it carries no measurements (or no step-model parameters) and the built-in does, the
    built-in's are kept, so measured and fitted data always win over datasheet-only data.
    """
    override_list = overrides.profiles if isinstance(overrides, ProfileCatalog) else overrides
    merged: dict[str, GPUProfile] = {p.name: p for p in builtin.profiles}
    for override in override_list:
        keys = set(override.keys)
        replaced = [p for p in merged.values() if keys & set(p.keys)]
        measured, step_model = override.measured, override.step_model
        for old in replaced:
            del merged[old.name]
            if measured is None and old.measured is not None:
                measured = old.measured
            if step_model is None and old.step_model is not None:
                step_model = old.step_model
        merged[override.name] = (
            override
            if measured is override.measured and step_model is override.step_model
            else override.model_copy(update={"measured": measured, "step_model": step_model})
        )
    how_to_add = builtin.how_to_add
    if isinstance(overrides, ProfileCatalog):
        how_to_add = overrides.how_to_add
    return ProfileCatalog(merged.values(), how_to_add)


def profile_yaml(profile: GPUProfile) -> str:
    """One profile as the YAML document `parse_profile` reads (camelCase, unset fields left out)."""
    data = profile.model_dump(mode="json", by_alias=True, exclude_none=True)
    return yaml.safe_dump(data, sort_keys=False, width=100)
