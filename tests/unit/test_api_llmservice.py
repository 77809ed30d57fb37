"""The API types refuse bad specs with a message naming the field, and fill in defaults."""

from __future__ import annotations

import pytest
from _llms import service, spec
from pydantic import ValidationError

from tokenpilot.api.llmservice import AUTO, LLMServiceSpec
from tokenpilot.api.model_shape import MODEL_PRESETS


def test_minimal_spec_gets_defaults() -> None:
    s = service().spec
    assert s.accelerator.sku == AUTO
    assert s.batching.chunked_prefill is True
    assert s.batching.max_num_batched_tokens == AUTO
    assert s.engine.tensor_parallel_size == 1
    assert s.gpus_per_replica == 1
    assert s.replicas == 1
    assert s.model.shape.resolve() == MODEL_PRESETS["llama-3.1-8b"]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}, "minReplicas must be <="),
        ({"batching": {"maxNumBatchedTokens": 64, "maxNumSeqs": 128}}, "maxNumSeqs"),
        ({"batching": {"maxNumBatchedTokens": "lots"}}, "maxNumBatchedTokens"),
        ({"batching": {"maxNumSeqs": 0}}, "maxNumSeqs"),
        ({"slo": {"itlP99": "fifty"}}, "itlP99"),
        ({"engine": {"tensorParallelSize": 3}}, "tensorParallelSize"),
        ({"engine": {"gpuMemoryUtilization": 1.5}}, "gpuMemoryUtilization"),
        ({"accelerator": {"gpusPerReplica": 1}, "engine": {"tensorParallelSize": 2}}, "gpusPer"),
        ({"autoscaling": {"metrics": {"type": "prometheus"}}}, "prometheusUrl"),
        (
            {
                "engine": {"maxModelLen": 8192},
                "batching": {"chunkedPrefill": False, "maxNumBatchedTokens": 2048},
            },
            "maxModelLen",
        ),
        (
            {"model": {"name": "m", "source": "ftp://x", "shape": {"preset": "llama-3.1-8b"}}},
            "source",
        ),
        (
            {"model": {"name": "m", "source": "hf://a/b", "shape": {"preset": "llama-9"}}},
            "unknown model preset",
        ),
        ({"model": {"name": "m", "source": "hf://a/b", "shape": {"numLayers": 2}}}, "shape"),
        ({"replicaz": 3}, "replicaz"),
    ],
)
def test_bad_specs_name_the_field(overrides: dict[str, object], needle: str) -> None:
    body = spec()
    body.update(overrides)
    with pytest.raises(ValidationError) as err:
        LLMServiceSpec.model_validate(body)
    assert needle in str(err.value)


def test_explicit_shape_resolves() -> None:
    shape = {
        "numParameters": 1000,
        "numLayers": 2,
        "numAttentionHeads": 4,
        "numKvHeads": 2,
        "headDim": 8,
        "hiddenSize": 32,
        "dtype": "fp8",
    }
    s = service(model__shape=shape).spec
    resolved = s.model.shape.resolve()
    assert resolved.num_layers == 2
    assert resolved.weight_bytes == 1000.0


def test_round_trip_through_camel_case() -> None:
    s = service(batching__maxNumBatchedTokens=4096).spec
    again = LLMServiceSpec.model_validate(s.model_dump(by_alias=True, mode="json"))
    assert again == s
