"""The tuner's inputs as command-line flags, one definition for `tokenpilot plan` and
`tokenpilot simulate`: each spelt as the vLLM flag or LLMService field it stands for, with the
API's default."""

from __future__ import annotations

import argparse

from tokenpilot.api.llmservice import (
    DEFAULT_BATCHING_PROFILE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_MODEL_LEN,
    DEFAULT_TENSOR_PARALLEL_SIZE,
    BatchingProfile,
)
from tokenpilot.core.plan_inputs import WorkloadHints


def add_tuner_flags(parser: argparse.ArgumentParser) -> None:
    """--max-model-len, --tensor-parallel-size and --profile."""
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=DEFAULT_MAX_MODEL_LEN,
        help=f"engine.maxModelLen: the engine's --max-model-len; longer requests are refused "
        f"(default: the LLMService's, {DEFAULT_MAX_MODEL_LEN}; Llama 3.1's own context is "
        "131072)",
    )
    parser.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=DEFAULT_TENSOR_PARALLEL_SIZE,
        help=f"engine.tensorParallelSize (default {DEFAULT_TENSOR_PARALLEL_SIZE})",
    )
    parser.add_argument(
        "--profile",
        choices=[p.value for p in BatchingProfile],
        default=DEFAULT_BATCHING_PROFILE.value,
        help="batching.profile: where between the tuner's bounds the budget goes (default: "
        f"the LLMService's, {DEFAULT_BATCHING_PROFILE.value})",
    )


def workload_hints(
    args: argparse.Namespace,
    *,
    prompt_p99_tokens: int | None = None,
    expected_context_tokens: int | None = None,
    max_num_seqs: int | None = None,
    token_budget: int | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
) -> WorkloadHints:
    """The tuner's hints: these flags, and what the command knows beside them."""
    return WorkloadHints(
        prompt_p99_tokens=prompt_p99_tokens,
        expected_context_tokens=expected_context_tokens,
        max_model_len=args.max_model_len,
        max_num_seqs=max_num_seqs,
        token_budget=token_budget,
        objective=BatchingProfile(args.profile),
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization,
    )
