"""vLLM's own batch defaults: what `vllm serve` runs with when a flag is left out.

vLLM picks `--max-num-batched-tokens` and `--max-num-seqs` from the GPU it finds
(`EngineArgs.get_batch_defaults` in vllm/engine/arg_utils.py): GPUs with at least
`LARGE_GPU_MIN_MEMORY_GIB` of memory whose name does not say A100 get the larger pair, every other
GPU the smaller one. These are the OpenAI server's figures (offline `LLM` use starts from larger
budgets); the docs quote the source (docs/tuning.md). This module is the one place the rule
lives: the CRD's text, the tuner, `tokenpilot plan` and the lab's baselines read it here.
"""

from __future__ import annotations

from typing import NamedTuple

from tokenpilot.api.gpu_profile import GPUProfile

# The memory a GPU needs for vLLM's larger defaults (vLLM compares the device's total memory,
# as the driver reports it, in GiB).
LARGE_GPU_MIN_MEMORY_GIB = 70
# vLLM excludes A100s by name from the larger defaults, whatever their memory.
EXCLUDED_NAME = "a100"


class BatchDefaults(NamedTuple):
    """vLLM's per-step token budget and its cap on running sequences for one GPU."""

    max_num_batched_tokens: int
    max_num_seqs: int


LARGE_GPU_DEFAULTS = BatchDefaults(max_num_batched_tokens=8192, max_num_seqs=1024)
OTHER_GPU_DEFAULTS = BatchDefaults(max_num_batched_tokens=2048, max_num_seqs=256)


def is_large_gpu(memory_gib: float, names: tuple[str, ...]) -> bool:
    """vLLM's test: enough memory, and no name that says A100."""
    excluded = any(EXCLUDED_NAME in name.lower() for name in names)
    return memory_gib >= LARGE_GPU_MIN_MEMORY_GIB and not excluded


def vllm_batch_defaults(profile: GPUProfile) -> BatchDefaults:
    """What vLLM runs with on this GPU when neither flag is set. The profile's name, aliases and
    product labels stand for the device name vLLM reads."""
    names = (profile.name, *profile.aliases, *profile.gpu_product_labels)
    return LARGE_GPU_DEFAULTS if is_large_gpu(profile.memory_gib, names) else OTHER_GPU_DEFAULTS


def describe_default_max_num_seqs() -> str:
    """vLLM's default cap on running sequences in words, for the API's field description."""
    return (
        f"{LARGE_GPU_DEFAULTS.max_num_seqs} on GPUs with at least {LARGE_GPU_MIN_MEMORY_GIB} GiB "
        f"other than A100, {OTHER_GPU_DEFAULTS.max_num_seqs} elsewhere"
    )


__all__ = [
    "LARGE_GPU_DEFAULTS",
    "LARGE_GPU_MIN_MEMORY_GIB",
    "OTHER_GPU_DEFAULTS",
    "BatchDefaults",
    "describe_default_max_num_seqs",
    "is_large_gpu",
    "vllm_batch_defaults",
]
