"""vLLM's batch defaults per GPU: the rule of its `get_batch_defaults`, in one place."""

from __future__ import annotations

import pytest

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.crd import crd
from tokenpilot.api.vllm_defaults import (
    LARGE_GPU_DEFAULTS,
    OTHER_GPU_DEFAULTS,
    is_large_gpu,
    vllm_batch_defaults,
)

CATALOG = load_builtin_catalog()


@pytest.mark.parametrize(
    ("memory_gib", "names", "large"),
    [
        # vLLM compares the device's total memory with 70 GiB and the device name with "a100".
        (79.6, ("NVIDIA H100 80GB HBM3",), True),
        (140.4, ("NVIDIA H200",), True),
        (70.0, ("a GPU at the line",), True),
        (69.9, ("a GPU just under it",), False),
        (80.0, ("NVIDIA A100-SXM4-80GB",), False),
        (80.0, ("A100-80GB", "NVIDIA-A100-SXM4-80GB"), False),
        (80.0, ("GPU", "nvidia-a100-pcie"), False),  # any name that says A100, in any case
        (45.0, ("NVIDIA L40S",), False),
        (95.0, ("NVIDIA RTX PRO 6000 Blackwell",), True),
    ],
)
def test_the_rule_is_memory_and_name(memory_gib: float, names: tuple[str, ...], large: bool):
    assert is_large_gpu(memory_gib, names) is large


def test_the_two_pairs_are_vllms():
    # The OpenAI server's figures in vLLM's get_batch_defaults (vllm/engine/arg_utils.py).
    assert LARGE_GPU_DEFAULTS == (8192, 1024)
    assert OTHER_GPU_DEFAULTS == (2048, 256)


@pytest.mark.parametrize(
    ("gpu", "defaults"),
    [
        ("H100-80GB", LARGE_GPU_DEFAULTS),
        ("H200", LARGE_GPU_DEFAULTS),
        ("A100-80GB", OTHER_GPU_DEFAULTS),
        ("A100-40GB", OTHER_GPU_DEFAULTS),
        ("L40S", OTHER_GPU_DEFAULTS),
        ("L4", OTHER_GPU_DEFAULTS),
        ("A10G", OTHER_GPU_DEFAULTS),
        ("RTX-5090", OTHER_GPU_DEFAULTS),
        ("RTX-6000", OTHER_GPU_DEFAULTS),
    ],
)
def test_every_built_in_profile(gpu: str, defaults: tuple[int, int]):
    assert vllm_batch_defaults(CATALOG.get(gpu)) == defaults


def test_every_built_in_profile_is_listed_above():
    assert sorted(CATALOG.names) == sorted(
        [
            "H100-80GB",
            "H200",
            "A100-80GB",
            "A100-40GB",
            "L40S",
            "L4",
            "A10G",
            "RTX-5090",
            "RTX-6000",
        ]
    )


def test_a_profile_named_for_an_a100_by_its_label_alone_gets_the_smaller_pair():
    profile = CATALOG.get("H100-80GB").model_copy(
        update={"name": "MY-GPU", "aliases": (), "gpu_product_labels": ("NVIDIA-A100-SXM4-80GB",)}
    )
    assert vllm_batch_defaults(profile) == OTHER_GPU_DEFAULTS


def test_the_crd_says_what_auto_starts_from():
    batching = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["batching"]["properties"]
    words = batching["maxNumSeqs"]["description"]
    assert "default for the GPU (1024 on GPUs with at least 70 GiB other than A100, 256" in words
    assert "256 elsewhere)" in words
