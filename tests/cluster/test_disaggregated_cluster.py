"""A disaggregated LLMService on the real API server, with the upstream InferencePool CRD: the
API refuses a split without an endpoint picker naming the field; a split service becomes a
prefill and a decode Deployment whose pods carry the llm-d router's role labels and whose
rendered objects the API server accepts; the InferencePool selects both pools' pods; status
names each pool's role and budget; a single-SKU service turned into a split loses its one
Deployment. The pods run the engine simulator in their roles and, beside each decode engine,
the routing sidecar's stand-in: a load sent to the decode pods naming a prefill pod, as the
endpoint picker does, is served through the hand-off with no failed request."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from _operator_harness import create, get_llms, operator_thread, patch_spec, sample
from test_routing_inference_pool import POOLS, install_crds

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.resources import DEPLOYMENTS, RESOURCES
from tokenpilot.adapters.metrics.parse import parse_metrics
from tokenpilot.core.render import ROLE_LABEL, SERVICE_LABEL
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
PODS = RESOURCES[("v1", "Pod")]
SPLIT = {
    "prefill": {"sku": "H100-80GB", "tensorParallelSize": 2, "replicas": 1},
    "decode": {"sku": "L40S", "replicas": 2},
    "routingSidecarImage": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.4.0",
}


@pytest.fixture
def operator(kubeconfig: Path, namespace: str) -> Iterator[None]:
    with operator_thread(kubeconfig, namespace, resync_s=2.0):
        yield


def single(namespace: str) -> dict[str, Any]:
    body = sample("llama-3.1-8b-h100.yaml", namespace)
    body["metadata"]["name"] = "chat"
    spec = body["spec"]
    spec["autoscaling"]["enabled"] = False
    spec.pop("batching", None)
    spec["slo"] = {"itlP99": "50ms", "ttftP99": "2s"}
    spec["replicas"] = 1
    return body


def test_a_split_without_an_endpoint_picker_is_refused_naming_the_field(
    client: KubeClient, namespace: str
) -> None:
    body = single(namespace)
    body["spec"]["disaggregation"] = SPLIT
    with pytest.raises(KubeError) as refused:
        create(client, body)
    assert refused.value.status == 422
    assert "spec.disaggregation needs spec.routing.inferencePool" in refused.value.message


def test_a_split_service_runs_a_prefill_and_a_decode_pool(
    client: KubeClient, namespace: str, operator: None
) -> None:
    install_crds(client)
    create(client, single(namespace))
    eventually(
        lambda: client.get(DEPLOYMENTS.path(namespace, "chat")),
        timeout_s=60,
        what="the single Deployment",
    )
    # Split it: an endpoint picker and the two pools.
    patch_spec(
        client,
        namespace,
        "chat",
        {
            "routing": {"inferencePool": {"endpointPicker": {"name": "chat-epp"}}},
            "disaggregation": SPLIT,
        },
    )

    def split_ready() -> dict[str, Any] | None:
        status = get_llms(client, namespace, "chat").get("status", {})
        pools = status.get("pools") or []
        ready = status.get("phase") == "Ready" and [p.get("readyReplicas") for p in pools]
        return status if ready == [1, 2] else None

    status = eventually(split_ready, timeout_s=180, what="both pools Ready")
    assert [(p["role"], p["sku"], p["deployment"]) for p in status["pools"]] == [
        ("prefill", "H100-80GB", "chat-prefill"),
        ("decode", "L40S", "chat-decode"),
    ]
    assert status["poolsSummary"] == "prefill H100-80GB 1/1, decode L40S 2/2"
    assert status["pools"][1]["maxNumBatchedTokens"] == 256  # L40S: vLLM's 256 sequences
    # The one Deployment is gone; the pods carry their role, and the InferencePool picks both.
    eventually(
        lambda: client.get(DEPLOYMENTS.path(namespace, "chat")) is None,
        timeout_s=60,
        what="the single Deployment deleted",
    )
    pods = client.request(
        "GET", PODS.path(namespace), query={"labelSelector": f"{SERVICE_LABEL}=chat"}
    )["items"]
    roles = sorted(p["metadata"]["labels"].get(ROLE_LABEL) for p in pods)
    assert roles == ["decode", "decode", "prefill"]
    decode = client.get(DEPLOYMENTS.path(namespace, "chat-decode"))
    assert decode is not None
    (sidecar,) = decode["spec"]["template"]["spec"]["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    pool = client.get(POOLS.path(namespace, "chat"))
    assert pool is not None and pool["spec"]["selector"]["matchLabels"] == {SERVICE_LABEL: "chat"}

    # A load through the hand-off: every request to a decode pod names the prefill pod.
    by_role: dict[str, list[str]] = {"prefill": [], "decode": []}
    for p in pods:
        by_role[p["metadata"]["labels"][ROLE_LABEL]].append(p["status"]["podIP"])
    (prefill_ip,) = by_role["prefill"]
    body = {"model": "llama-3.1-8b-instruct", "prompt": "word " * 400, "max_tokens": 8}

    def send(i: int) -> int:
        decode_ip = by_role["decode"][i % 2]
        answer = httpx.post(
            f"http://{decode_ip}:8000/v1/completions",
            json=body,
            headers={"x-prefiller-host-port": f"{prefill_ip}:8000"},
            timeout=60.0,
        )
        return answer.status_code

    with ThreadPoolExecutor(max_workers=4) as pool:
        codes = list(pool.map(send, range(NUM_REQUESTS)))
    assert codes == [200] * NUM_REQUESTS
    # The prefill engine sampled one token a request; the decode engines every token the
    # clients got, from prompts whose KV they were handed.
    assert metric(prefill_ip, "vllm:generation_tokens_total") == NUM_REQUESTS
    decoded = sum(metric(ip, "vllm:generation_tokens_total") for ip in by_role["decode"])
    assert decoded == 8 * NUM_REQUESTS
    handed = sum(metric(ip, "vllm:external_prefix_cache_hits_total") for ip in by_role["decode"])
    assert handed > 0


NUM_REQUESTS = 24


def metric(ip: str, name: str) -> float:
    page = parse_metrics(httpx.get(f"http://{ip}:8000/metrics", timeout=30.0).text)
    return page.sum(name) or 0.0
