"""The shape of a model: what capacity planning and the step-time model need to know about it.

A shape is either given field by field or named by a preset. Preset figures are the published
model configurations (each model's `config.json` on its hub page); parameter counts are the
published totals including embeddings.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from tokenpilot.api.base import ApiModel


class DType(StrEnum):
    """Storage type of weights or KV cache entries."""

    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"

    @property
    def num_bytes(self) -> float:
        return _DTYPE_BYTES[self]


_DTYPE_BYTES: dict[DType, float] = {
    DType.bfloat16: 2.0,
    DType.float16: 2.0,
    DType.float32: 4.0,
    DType.fp8: 1.0,
    DType.int8: 1.0,
    DType.int4: 0.5,
}


class ModelShape(ApiModel):
    """The dimensions of a decoder-only transformer that set its memory and compute cost."""

    num_parameters: int = Field(gt=0, description="Total parameter count, e.g. 8030261248.")
    num_layers: int = Field(gt=0, description="Number of transformer layers.")
    num_attention_heads: int = Field(gt=0, description="Number of query heads per layer.")
    num_kv_heads: int = Field(gt=0, description="Number of key/value heads per layer (GQA).")
    head_dim: int = Field(gt=0, description="Dimension of one attention head.")
    hidden_size: int = Field(gt=0, description="Width of the residual stream.")
    dtype: DType = Field(DType.bfloat16, description="Storage type of the weights.")
    kv_cache_dtype: DType | None = Field(
        None, description="Storage type of the KV cache; defaults to the weights' dtype."
    )

    @model_validator(mode="after")
    def _heads_divide(self) -> Self:
        if self.num_attention_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"numAttentionHeads ({self.num_attention_heads}) must be a multiple of "
                f"numKvHeads ({self.num_kv_heads})"
            )
        return self

    @property
    def weight_bytes(self) -> float:
        return self.num_parameters * self.dtype.num_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes of KV cache one token occupies across all layers: 2 (K and V) x layers x
        KV heads x head dim x dtype bytes."""
        kv_dtype = self.kv_cache_dtype or self.dtype
        return 2.0 * self.num_layers * self.num_kv_heads * self.head_dim * kv_dtype.num_bytes


MODEL_PRESETS: dict[str, ModelShape] = {
    "llama-3.2-1b": ModelShape(
        num_parameters=1_235_814_400,
        num_layers=16,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=64,
        hidden_size=2048,
    ),
    "llama-3.2-3b": ModelShape(
        num_parameters=3_212_749_824,
        num_layers=28,
        num_attention_heads=24,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=3072,
    ),
    "llama-3.1-8b": ModelShape(
        num_parameters=8_030_261_248,
        num_layers=32,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=4096,
    ),
    "mistral-7b": ModelShape(
        num_parameters=7_241_732_096,
        num_layers=32,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=4096,
    ),
    "qwen2.5-7b": ModelShape(
        num_parameters=7_615_616_512,
        num_layers=28,
        num_attention_heads=28,
        num_kv_heads=4,
        head_dim=128,
        hidden_size=3584,
    ),
    "llama-3.1-70b": ModelShape(
        num_parameters=70_553_706_496,
        num_layers=80,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=8192,
    ),
}


class UnknownModelPreset(ValueError):
    """A model preset name that is not in MODEL_PRESETS."""


def model_preset(name: str) -> ModelShape:
    """The shape of a named preset, or an error that lists the known names."""
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(MODEL_PRESETS))
        raise UnknownModelPreset(
            f"unknown model preset {name!r}; known presets: {known}; "
            "or give the shape field by field (numParameters, numLayers, numAttentionHeads, "
            "numKvHeads, headDim, hidden size)"
        ) from None
