"""No step is cheaper than physics allows: the datasheet floor, computed here independently.

The floor of a step is the larger of its arithmetic at 100 % of the dense datasheet FLOPS and its
bytes at 100 % of the datasheet bandwidth, per GPU at tensor parallelism `tp`:

    FLOPs = 2 x parameters / tp x tokens
          + 4 x layers x attention heads x head dim / tp x (query, key) pairs attended
    bytes = weight bytes / tp + KV bytes per token per GPU x (context read + tokens written)

A prefill chunk of c tokens after o cached ones attends c x o + c (c + 1) / 2 pairs; a decode
attends its whole context. Written first against the pre-physics model, this test showed issue
11's failure (docs/tuning.md quotes it): 32 decodes and a 2,048-token prefill priced at 10.3 ms on
H100 against a 34.9 ms floor.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.model_shape import MODEL_PRESETS, ModelShape
from tokenpilot.core.roofline import PrefillChunk
from tokenpilot.core.steptime import step_time_model

CATALOG = load_builtin_catalog()
TENSOR_PARALLEL = (1, 2, 4, 8)


def reference_floor_s(
    peak_tflops: float,
    bandwidth_gbps: float,
    shape: ModelShape,
    tp: int,
    num_decodes: int,
    decode_context_tokens: int,
    prefill_chunks: tuple[tuple[int, int], ...],
) -> float:
    """The datasheet floor of one step, from the shape and the step mix alone."""
    num_prefill = sum(c for c, _ in prefill_chunks)
    num_tokens = num_decodes + num_prefill
    pairs = decode_context_tokens + sum(c * o + c * (c + 1) // 2 for c, o in prefill_chunks)
    attention_width = shape.num_layers * shape.num_attention_heads * shape.head_dim
    flops = (2.0 * shape.num_parameters * num_tokens + 4.0 * attention_width * pairs) / tp
    kv_per_token = shape.kv_bytes_per_token / min(tp, shape.num_kv_heads)
    kv_tokens = decode_context_tokens + sum(o for _, o in prefill_chunks) + num_tokens
    bytes_moved = shape.weight_bytes / tp + kv_per_token * kv_tokens
    return max(flops / (peak_tflops * 1e12), bytes_moved / (bandwidth_gbps * 1e9))


def _price_s(
    gpu: str,
    preset: str,
    tp: int,
    num_decodes: int,
    decode_context_tokens: int,
    prefill_chunks: tuple[tuple[int, int], ...],
) -> tuple[float, float]:
    """The model's step and its own floor for this mix."""
    model = step_time_model(CATALOG.get(gpu), MODEL_PRESETS[preset], tp)
    chunks = [PrefillChunk(c, o) for c, o in prefill_chunks]
    step_s = model.iteration_s(num_decodes, decode_context_tokens, chunks)
    return step_s, model.breakdown(num_decodes, decode_context_tokens, chunks).floor_s


@st.composite
def step_mixes(draw: st.DrawFn) -> tuple[str, str, int, int, int, tuple[tuple[int, int], ...]]:
    gpu = draw(st.sampled_from(CATALOG.names))
    preset = draw(st.sampled_from(sorted(MODEL_PRESETS)))
    shape = MODEL_PRESETS[preset]
    tp = draw(st.sampled_from([t for t in TENSOR_PARALLEL if shape.num_attention_heads % t == 0]))
    num_decodes = draw(st.integers(0, 256))
    context_each = draw(st.integers(1, 32768)) if num_decodes else 0
    chunks = draw(st.lists(st.tuples(st.integers(1, 16384), st.integers(0, 32768)), max_size=8))
    if num_decodes == 0 and not chunks:
        chunks = [(1, 0)]
    return gpu, preset, tp, num_decodes, num_decodes * context_each, tuple(chunks)


# Issue 11's table: 32 decodes beside one prefill chunk on the study's GPUs.
@example(mix=("H100-80GB", "llama-3.1-8b", 1, 32, 32 * 1024, ((2048, 0),)))
@example(mix=("L40S", "llama-3.1-8b", 1, 32, 32 * 1024, ((2048, 0),)))
@example(mix=("A100-80GB", "llama-3.1-8b", 1, 32, 32 * 1024, ((2048, 0),)))
@settings(max_examples=400, deadline=None)
@given(mix=step_mixes())
def test_no_step_is_cheaper_than_its_datasheet_floor(
    mix: tuple[str, str, int, int, int, tuple[tuple[int, int], ...]],
) -> None:
    gpu, preset, tp, num_decodes, context, chunks = mix
    profile = CATALOG.get(gpu)
    floor_s = reference_floor_s(
        profile.bf16_dense_tflops,
        profile.hbm_bandwidth_gbps,
        MODEL_PRESETS[preset],
        tp,
        num_decodes,
        context,
        chunks,
    )
    step_s, model_floor_s = _price_s(gpu, preset, tp, num_decodes, context, chunks)
    assert model_floor_s == pytest.approx(floor_s, rel=1e-9)
    assert step_s >= floor_s, (
        f"{gpu} {preset} tp={tp}: {num_decodes} decodes over {context} context tokens, "
        f"prefill chunks {chunks}: step {step_s * 1e3:.3f} ms < floor {floor_s * 1e3:.3f} ms"
    )
