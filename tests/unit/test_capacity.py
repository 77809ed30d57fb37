"""The capacity planner: byte arithmetic, blocks, concurrency and the Infeasible messages."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.model_shape import MODEL_PRESETS, model_preset
from tokenpilot.core.capacity import BLOCK_SIZE, GIB, RUNTIME_RESERVE_GIB, plan_capacity
from tokenpilot.core.errors import Infeasible, InvalidSpec

CATALOG = load_builtin_catalog()


def test_llama_8b_on_h100_by_hand():
    plan = plan_capacity(CATALOG.get("H100"), model_preset("llama-3.1-8b"), 1, 0.9, 8192, 4096)
    # 8.03e9 params x 2 bytes; 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 128 KiB per token.
    assert plan.weights_gib_per_gpu == pytest.approx(8_030_261_248 * 2 / GIB)
    assert plan.kv_bytes_per_token == 131072
    kv_gib = 79.6 * 0.9 - plan.weights_gib_per_gpu - RUNTIME_RESERVE_GIB
    assert plan.num_kv_blocks == int(kv_gib * GIB // (131072 * 16))
    assert plan.num_kv_tokens == plan.num_kv_blocks * 16
    assert plan.max_concurrency == plan.num_kv_blocks // (4096 // 16)
    assert "fit at once" in plan.reason


@pytest.mark.parametrize(
    ("model", "tp", "kv_per_gpu"),
    [("llama-3.1-70b", 2, 2 * 80 * 8 * 128 * 2 / 2), ("llama-3.1-70b", 8, 2 * 80 * 128 * 2)],
)
def test_kv_heads_split_across_ranks(model: str, tp: int, kv_per_gpu: float) -> None:
    plan = plan_capacity(CATALOG.get("H100"), model_preset(model), tp, 0.9, 8192)
    assert plan.kv_bytes_per_token == kv_per_gpu


def test_weights_that_do_not_fit_give_needed_vs_available_and_the_fix():
    with pytest.raises(Infeasible) as err:
        plan_capacity(CATALOG.get("L40S"), model_preset("llama-3.1-70b"), 1, 0.9, 8192)
    message = str(err.value)
    assert "131.4 GiB per GPU" in message and "40.5 GiB" in message
    assert "tensorParallelSize to 4" in message


def test_max_model_len_that_does_not_fit_says_how_long_it_can_be():
    with pytest.raises(
        Infeasible, match=r"maxModelLen 131072 needs 16\.00 GiB .* lower maxModelLen"
    ):
        plan_capacity(CATALOG.get("RTX-6000"), model_preset("llama-3.1-8b"), 1, 0.9, 131072)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gpu_memory_utilization": 90}, "gpuMemoryUtilization must be in"),
        ({"tensor_parallel_size": 3}, "must be at least 1 and divide"),
        ({"expected_context_tokens": 10000}, "between 1 and maxModelLen"),
    ],
)
def test_bad_arguments(kwargs: dict[str, float], match: str) -> None:
    args: dict[str, object] = {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 8192,
        "expected_context_tokens": None,
    }
    args.update(kwargs)
    with pytest.raises(InvalidSpec, match=match):
        plan_capacity(CATALOG.get("H100"), model_preset("llama-3.1-8b"), **args)  # type: ignore[arg-type]


@given(
    gpu=st.sampled_from(CATALOG.names),
    model=st.sampled_from(sorted(MODEL_PRESETS)),
    tp=st.sampled_from([1, 2, 4, 8]),
    utilization=st.floats(0.3, 1.0),
    max_model_len=st.integers(16, 131072),
    context_fraction=st.floats(0.01, 1.0),
)
def test_never_reports_a_fit_the_bytes_forbid(
    gpu: str, model: str, tp: int, utilization: float, max_model_len: int, context_fraction: float
) -> None:
    profile, shape = CATALOG.get(gpu), model_preset(model)
    context = max(1, int(max_model_len * context_fraction))
    if shape.num_attention_heads % tp:
        return
    try:
        plan = plan_capacity(profile, shape, tp, utilization, max_model_len, context)
    except Infeasible:
        return
    usable = profile.memory_gib * utilization * GIB
    used = shape.weight_bytes / tp + RUNTIME_RESERVE_GIB * GIB
    used += plan.num_kv_blocks * BLOCK_SIZE * plan.kv_bytes_per_token
    assert used <= usable
    blocks_per_seq = math.ceil(context / BLOCK_SIZE)
    assert plan.max_concurrency * blocks_per_seq <= plan.num_kv_blocks
    assert plan.num_kv_blocks >= math.ceil(max_model_len / BLOCK_SIZE)
    assert plan.max_concurrency >= 1
