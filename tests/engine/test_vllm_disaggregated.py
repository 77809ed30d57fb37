"""Prefill and decode apart on real vLLM (CPU build, tiny model).

- Each pool's engine arguments, the renderer's flags at the batching `plan_phases` gives that
  pool plus its `--kv-transfer-config` (NIXL, the prefill pool producing the KV and the decode
  pool consuming it), are accepted whole by vLLM's own serve parser.
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
from tokenpilot.core.batching import spec_decision
from tokenpilot.core.disaggregation import PhaseWorkload, kv_transfer_config, plan_phases
from tokenpilot.core.plan_inputs import plan_inputs
from tokenpilot.core.render import RenderFacts, vllm_args
from tokenpilot_lab.vllm_cli import check_command_lines
from tokenpilot_lab.vllm_server import VllmServer, VllmServerConfig, running_vllm

pytestmark = pytest.mark.engine

TIMEOUT_S = 120.0
BLOCK_TOKENS = 128  # the CPU build's KV block: the connector moves whole blocks
PROMPT_TOKENS = 365


def _service() -> LLMService:
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
            },
        }
    )


def test_vllm_accepts_each_pools_engine_arguments() -> None:
    service = _service()
    h100, l40s = (load_builtin_catalog().get(g) for g in ("H100-80GB", "L40S"))
    plan = plan_phases(
        plan_inputs(service.spec, h100),
        plan_inputs(service.spec, l40s),
        PhaseWorkload(12_000, 48_000, 200),
    )
    lines = []
    for phase, gpu in ((plan.prefill, h100), (plan.decode, l40s)):
        facts = RenderFacts(
            sku_name=gpu.name,
            gpu_product_labels=gpu.gpu_product_labels,
            batching=spec_decision(phase.token_budget, phase.max_num_seqs),
        )
        lines.append(
            [*vllm_args(service, facts), "--kv-transfer-config", kv_transfer_config(phase.role)]
        )
    # Known answers: a role vLLM does not have, and no role at all, are refused.
    bad_role = [*lines[0][:-1], '{"kv_connector":"NixlConnector","kv_role":"kv_sender"}']
    no_role = [*lines[0][:-1], '{"kv_connector":"NixlConnector"}']
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

    with (
        running_vllm(config("kv_producer"), logs / "prefill.log") as prefill,
        running_vllm(config("kv_consumer"), logs / "decode.log") as decode,
    ):
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
