"""Prefill and decode apart on real vLLM (CPU build, tiny model).

- Each pool's engine arguments, as the reconciler renders a disaggregated LLMService's two
  Deployments (each pool's batching, tensor parallelism and `--kv-transfer-config`: NIXL, the
  prefill pool producing the KV and the decode pool consuming it), are accepted whole by
  vLLM's own serve parser.
- NIXL itself cannot run on this build (its `nixl` package is a GPU-side transfer library that
  the CPU build does not ship), so the hand-off is shown with the KV connector the CPU build can
  run, vLLM's ExampleConnector, which writes each layer's KV to a shared directory: a request
  prefilled by one engine (max_tokens 1, as a prefill instance is asked) is decoded by another
  that finds the prompt's KV there instead of computing it, and answers as one engine alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tokenpilot.adapters.metrics.parse import parse_metrics
from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.render_plan import plan
from tokenpilot.core.sku import GPU_PRODUCT_LABEL, NodeFacts
from tokenpilot_lab.vllm_cli import check_command_lines
from tokenpilot_lab.vllm_server import VllmServer, VllmServerConfig, running_vllms

pytestmark = pytest.mark.engine

TIMEOUT_S = 120.0
BLOCK_TOKENS = 128  # the CPU build's KV block: the connector moves whole blocks
PROMPT_TOKENS = 365


def _split_service() -> LLMService:
    """A disaggregated service: two-GPU H100 prefill replicas, L40S decode replicas."""
    return LLMService.model_validate(
        {
            "apiVersion": "serving.tokenpilot.dev/v1alpha1",
            "kind": "LLMService",
            "metadata": {"name": "chat", "namespace": "ml", "uid": "uid-1", "generation": 1},
            "spec": {
                "model": {
                    "name": "chat",
                    "source": "hf://org/model",
                    "shape": {"preset": "llama-3.1-8b"},
                },
                "engine": {"maxModelLen": 131072},
                "slo": {"ttftP99": "2s", "itlP99": "50ms"},
                "routing": {"inferencePool": {"endpointPicker": {"name": "epp", "port": 9002}}},
                "disaggregation": {
                    "prefill": {"sku": "H100-80GB", "tensorParallelSize": 2},
                    "decode": {"sku": "L40S"},
                    "routingSidecarImage": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.4.0",
                },
            },
        }
    )


def test_vllm_accepts_each_pools_rendered_engine_arguments() -> None:
    catalog = load_builtin_catalog()
    planned = plan(
        _split_service(),
        nodes=(
            NodeFacts("h100", {GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}, 8),
            NodeFacts("l40s", {GPU_PRODUCT_LABEL: "NVIDIA-L40S"}, 8),
        ),
        by_name=catalog.get,
        by_product=catalog.by_product_label,
        service_monitor_served=False,
    )
    lines = [
        list(m["spec"]["template"]["spec"]["containers"][0]["args"])
        for m in planned.manifests
        if m["kind"] == "Deployment"
    ]
    assert len(lines) == 2 and all("--kv-transfer-config" in line for line in lines)
    # Known answers: a role vLLM does not have, and no role at all, are refused.
    bad_role = [*lines[0][:-1], '{"kv_connector":"NixlConnector","kv_role":"kv_sender"}']
    no_role = [*lines[0][:-1], '{"kv_connector":"NixlConnector"}']
    assert lines[0][-2] == "--kv-transfer-config"
    verdicts = check_command_lines([*lines, bad_role, no_role])
    for verdict in verdicts[:2]:
        assert verdict.accepted, f"vLLM rejects {list(verdict.args)}: {verdict.error}"
    assert [v.accepted for v in verdicts[2:]] == [False, False]


@pytest.fixture(scope="module")
def prefill_and_decode(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[VllmServer, VllmServer]]:
    store = tmp_path_factory.mktemp("kv-store")
    logs = tmp_path_factory.mktemp("vllm-pd")

    def config(role: str) -> VllmServerConfig:
        kv = {
            "kv_connector": "ExampleConnector",
            "kv_role": role,
            "kv_connector_extra_config": {"shared_storage_path": str(store)},
        }
        return VllmServerConfig(
            model_dir=tiny_model_dir,
            extra_args=("--kv-transfer-config", json.dumps(kv), "--max-num-batched-tokens", "1024"),
        )

    with running_vllms(
        (config("kv_producer"), logs / "prefill.log"),
        (config("kv_consumer"), logs / "decode.log"),
    ) as (prefill, decode):
        yield prefill, decode


def _counter(base_url: str, name: str) -> float | None:
    page = parse_metrics(httpx.get(f"{base_url}/metrics", timeout=TIMEOUT_S).text)
    return page.sum(f"{name}_total")


def test_a_request_prefilled_by_one_engine_is_decoded_by_another(
    prefill_and_decode: tuple[VllmServer, VllmServer],
) -> None:
    prefill, decode = prefill_and_decode
    prompt = list(range(3, 3 + PROMPT_TOKENS))
    body = {
        "model": "tiny",
        "prompt": prompt,
        "max_tokens": 12,
        "temperature": 0,
        "ignore_eos": True,
    }
    with httpx.Client(timeout=TIMEOUT_S) as client:
        # The prefill engine is asked for one token; its connector writes the prompt's KV.
        first = client.post(f"{prefill.base_url}/v1/completions", json={**body, "max_tokens": 1})
        first.raise_for_status()
        assert first.json()["usage"]["completion_tokens"] == 1
        # The decode engine answers the whole request from the KV it finds.
        handed = client.post(f"{decode.base_url}/v1/completions", json=body)
        handed.raise_for_status()
        alone = client.post(f"{prefill.base_url}/v1/completions", json=body)
        alone.raise_for_status()
    assert handed.json()["usage"]["completion_tokens"] == 12
    assert handed.json()["choices"][0]["text"] == alone.json()["choices"][0]["text"]
    # Every whole block of the prompt came from the prefill engine, none from its own cache.
    whole_blocks = PROMPT_TOKENS // BLOCK_TOKENS * BLOCK_TOKENS
    assert _counter(decode.base_url, "vllm:external_prefix_cache_hits") == whole_blocks
    assert _counter(decode.base_url, "vllm:prefix_cache_hits") == 0
