"""GPU profiles: the built-in catalog, lookups, the merge rule and messages for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenpilot.adapters.profiles import (
    builtin_profiles_dir,
    load_builtin_catalog,
    load_catalog,
    parse_configmap_data,
)
from tokenpilot.api.gpu_profile import GPUProfile, ParameterBasis
from tokenpilot.core.errors import InvalidSpec, UnknownGPU
from tokenpilot.core.profiles import (
    ProfileCatalog,
    measurements_under_floor,
    merge_catalogs,
    parse_profile,
)

CATALOG = load_builtin_catalog()
H100_TEXT = (builtin_profiles_dir() / "h100-80gb.yaml").read_text()
L4_TEXT = (builtin_profiles_dir() / "l4.yaml").read_text()


def test_builtin_catalog_has_the_study_gpus_measured_and_the_others_marked_datasheet_only():
    measured = {p.name for p in CATALOG.profiles if p.is_measured}
    datasheet = {p.name for p in CATALOG.profiles if not p.is_measured}
    assert measured == {"H100-80GB", "H200", "L40S", "RTX-5090", "RTX-6000"}
    assert datasheet == {"A100-80GB", "A100-40GB", "L4", "A10G"}
    for profile in CATALOG.profiles:
        assert profile.hourly_cost_usd > 0 and profile.hourly_cost_source
        if profile.measured is not None:
            assert profile.measured.provenance.model == "llama-3.1-8b"
            assert "vLLM V1" in profile.measured.provenance.engine
        else:
            assert "Not measured" in (profile.notes or "")


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("H100-80GB", "H100-80GB"),
        ("h100", "H100-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("nvidia h100 80gb hbm3", "H100-80GB"),
        ("NVIDIA-H200", "H200"),
        ("NVIDIA-L40S", "L40S"),
        ("NVIDIA-GeForce-RTX-5090", "RTX-5090"),
        ("Quadro-RTX-6000", "RTX-6000"),
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA-L4", "L4"),
        ("NVIDIA-A10G", "A10G"),
    ],
)
def test_lookup_by_name_alias_or_product_label(query: str, name: str) -> None:
    assert CATALOG.get(query).name == name


def test_unknown_gpu_names_the_known_ones_and_the_fix():
    with pytest.raises(UnknownGPU) as err:
        CATALOG.get("B200")
    message = str(err.value)
    assert "'B200'" in message
    for name in CATALOG.names:
        assert name in message
    assert "add a profile for it" in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("memoryGib: 22.5", "memoryGib: 24GB", ["memoryGib", "'24GB'", "in GiB"]),
        ("memoryGib: 22.5", "memoryGib: 23040", ["memoryGib", "unit is GiB"]),
        ("hbmBandwidthGbps: 300", "hbmBandwidthGbps: 0.3", ["hbmBandwidthGbps", "TB/s", "3350"]),
        ("bf16DenseTflops: 121", "bf16DenseTflops: 121 TFLOPS", ["bf16DenseTflops", "TFLOPS"]),
        ("architecture: Ada Lovelace\n", "", ["architecture", "missing", "add `architecture"]),
        ("name: L4\n", "name: L4\ncolour: green\n", ["colour", "unknown field"]),
        ("[NVIDIA-L4]", "[NVIDIA L4]", ["gpuProductLabels", "'NVIDIA-L4'"]),
    ],
)
def test_bad_profile_file_names_file_field_and_fix(old: str, new: str, expected: list[str]):
    assert old in L4_TEXT
    with pytest.raises(InvalidSpec) as err:
        parse_profile(L4_TEXT.replace(old, new), "profiles/l4.yaml")
    message = str(err.value)
    assert message.startswith("profiles/l4.yaml")
    for part in expected:
        assert part in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("stepMs: 8.4}", "stepMs: 0.0084}", ["measured.decodeSteps[0].stepMs", "milliseconds"]),
        ("stepMs: 8.4}", "stepMs: 8.4ms}", ["measured.decodeSteps[0].stepMs", "milliseconds"]),
        ("model: llama-3.1-8b", "model: llama-8b", ["measured.provenance.model", "llama-3.1-8b"]),
        ("  thresholdPrefillTokens: 8192\n", "", ["thresholdPrefillTokens", "missing"]),
    ],
)
def test_bad_measured_block_names_the_nested_field(old: str, new: str, expected: list[str]):
    assert old in H100_TEXT
    with pytest.raises(InvalidSpec) as err:
        parse_profile(H100_TEXT.replace(old, new, 1), "calibration/h100.yaml")
    for part in ["calibration/h100.yaml", *expected]:
        assert part in str(err.value)


@pytest.mark.parametrize("text", ["name: [unclosed", "- just\n- a list\n", ""])
def test_text_that_is_not_a_profile_mapping(text: str) -> None:
    with pytest.raises(InvalidSpec, match=r"^x\.yaml: "):
        parse_profile(text, "x.yaml")


def test_override_without_measurements_keeps_the_builtin_measurements():
    cheaper = parse_profile(H100_TEXT.replace("hourlyCostUsd: 6.16", "hourlyCostUsd: 2.0"), "cm")
    cheaper = cheaper.model_copy(update={"measured": None})
    merged = merge_catalogs(CATALOG, [cheaper])
    h100 = merged.get("H100")
    assert h100.hourly_cost_usd == 2.0
    assert h100.measured == CATALOG.get("H100").measured
    assert len(merged) == len(CATALOG)


def test_measured_override_replaces_the_builtin_measurements():
    calibrated = parse_profile(
        H100_TEXT.replace("thresholdPrefillTokens: 8192", "thresholdPrefillTokens: 6144"), "cm"
    )
    merged = merge_catalogs(CATALOG, [calibrated])
    measured = merged.get("NVIDIA-H100-80GB-HBM3").measured
    assert measured is not None and measured.threshold_prefill_tokens == 6144


def test_measured_builtin_wins_over_datasheet_only_override_of_another_spelling():
    # An override that names the SKU only by its product label still replaces it.
    renamed = parse_profile(
        L4_TEXT.replace("name: L4", "name: L4-custom").replace("aliases: [L4-24GB]", "aliases: []"),
        "cm",
    )
    merged = merge_catalogs(CATALOG, [renamed])
    assert merged.get("NVIDIA-L4").name == "L4-custom"
    assert "L4" not in merged


def test_two_profiles_claiming_one_label_is_an_error():
    twin = parse_profile(L4_TEXT.replace("name: L4", "name: L4-twin"), "cm")
    with pytest.raises(InvalidSpec, match="both claim"):
        ProfileCatalog([*CATALOG.profiles, twin])


def test_configmap_profiles_override_and_add(tmp_path: Path) -> None:
    new_sku = (
        L4_TEXT.replace("name: L4", "name: B200")
        .replace("[NVIDIA-L4]", "[NVIDIA-B200]")
        .replace("aliases: [L4-24GB]", "aliases: []")
    )
    catalog = load_catalog([], {"b200.yaml": new_sku})
    assert catalog.get("NVIDIA-B200").name == "B200"
    (tmp_path / "cheap-h100.yaml").write_text(H100_TEXT.replace("6.16", "1.5"))
    assert load_catalog([tmp_path]).get("H100").hourly_cost_usd == 1.5


def test_configmap_key_that_is_not_yaml_is_refused():
    with pytest.raises(InvalidSpec, match=r"ConfigMap gpus: key 'README' .* <sku>\.yaml"):
        parse_configmap_data({"README": "hi"}, "gpus")


def test_configmap_error_names_the_key():
    with pytest.raises(InvalidSpec, match=r"ConfigMap gpus, key l4\.yaml: invalid"):
        parse_configmap_data({"l4.yaml": L4_TEXT.replace("22.5", "22.5GiB")}, "gpus")


def test_a_measurement_faster_than_the_datasheet_is_refused_naming_file_cell_and_floor():
    # Study 004's 1 x 2048 cell: +7 % of an 11 ms step, where 2,048 prompt tokens of Llama-3.1-8B
    # alone need 33 ms at 100 % of the H100's 989 TFLOPS.
    cell = "      - {numPrefill: 1, prefillLen: 128, interferencePct: 5, upperBound: true}\n"
    assert cell in H100_TEXT
    text = H100_TEXT.replace(
        cell, cell + "      - {numPrefill: 1, prefillLen: 2048, interferencePct: 7}\n", 1
    )
    with pytest.raises(InvalidSpec) as err:
        parse_profile(text, "calibration/h100.yaml")
    message = str(err.value)
    for part in [
        "calibration/h100.yaml",
        "measured.heatmap.cells[1]",
        "1 x 2048 prefill beside 32 decodes",
        "11.8 ms is under the floor of 34.9 ms",
        "989 TFLOPS",
    ]:
        assert part in message


def test_a_decode_step_is_checked_at_its_stated_context():
    fast = "    - {numDecode: 8, stepMs: 8.4}\n"
    assert fast in H100_TEXT
    # 8 sequences of 100K tokens read 105 GB of KV: 31 ms at 3.35 TB/s.
    text = H100_TEXT.replace(fast, "    - {numDecode: 8, stepMs: 8.4, contextTokens: 100000}\n")
    with pytest.raises(InvalidSpec, match=r"measured\.decodeSteps\[0\] \(8 decodes\): 8\.4 ms"):
        parse_profile(text, "x.yaml")


@pytest.mark.parametrize("profile", CATALOG.profiles, ids=lambda p: p.name)
def test_every_builtin_measurement_is_physically_possible(profile: GPUProfile) -> None:
    assert measurements_under_floor(profile) == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("computeEfficiency: {value: 0.60", "computeEfficiency: {value: 1.2", ["not below 1"]),
        ("basis: fitted", "basis: guessed", ["stepModel.computeEfficiency.basis"]),
        ("overheadMs: {value: 0.7", "overheadMs: {value: -1", ["stepModel.overheadMs.value"]),
        ("overlapExponent: {value: 1.6", "overlapExponent: {value: 0.5", ["is below 1"]),
        (
            "  overlapExponent: {value: 1.6",
            "  unusedExponent: {value: 1.6",
            ["stepModel.overlapExponent: missing", "stepModel.unusedExponent"],
        ),
    ],
)
def test_bad_step_model_names_the_field(old: str, new: str, expected: list[str]):
    assert old in H100_TEXT
    with pytest.raises(InvalidSpec) as err:
        parse_profile(H100_TEXT.replace(old, new, 1), "calibrated.yaml")
    for part in ["calibrated.yaml", *expected]:
        assert part in str(err.value)


def test_every_builtin_step_model_parameter_names_its_basis_and_data():
    for profile in CATALOG.profiles:
        params = profile.step_model
        assert params is not None, profile.name
        for value in (
            params.compute_efficiency,
            params.bandwidth_efficiency,
            params.overlap_exponent,
            params.overhead_ms,
            params.all_reduce_latency_us,
        ):
            assert value.basis in ParameterBasis and len(value.data) > 20
        assert profile.interconnect_gbps is not None


def test_override_without_step_model_keeps_the_builtin_fit():
    own = parse_profile(H100_TEXT, "cm").model_copy(update={"step_model": None})
    merged = merge_catalogs(CATALOG, [own])
    assert merged.get("H100").step_model == CATALOG.get("H100").step_model
