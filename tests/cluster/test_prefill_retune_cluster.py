"""A disaggregated service's prefill chunk, re-tuned from what its decode engines served, on the
dev cluster.

Llama 3.1 8B, a prefill pool of two H100s a replica and a decode pool of one, engine simulators
timing steps like them, no `spec.workload` and `retune` at its default (Auto). The prefill
engines open on the chunk planned for the API's defaults (1,024 tokens). The load sends
6,000-token prompts with four-token answers at half what one prefill replica carries, each to a
Ready decode pod naming a Ready prefill pod, as the endpoint picker routes. Once the decode
engines' histograms hold `MIN_REQUESTS` requests, the mix they served calls for chunks of 4,096
(about 1.1x the prefill pool's load within its TTFT): the reconciler rolls the prefill
Deployment once, the `Retuned` Event names the old and the new chunk, status.tuning says it was
planned for what was observed, the decode Deployment is left as it was, and no request fails.
The operator's /metrics gives each pool's budget (`tokenpilot_pool_token_budget{phase}`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _operator_harness import (
    create,
    events_of,
    get_llms,
    metrics_ports,
    operator_page,
    operator_thread,
)
from test_disaggregated_autoscale import ready_ips, routed
from test_disaggregated_autoscale import service as split_service
from test_routing_inference_pool import install_crds

from tokenpilot.adapters.kube import KubeClient, NotFound
from tokenpilot.adapters.kube.resources import DEPLOYMENTS, LLMSERVICES
from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.disaggregation import PhaseWorkload
from tokenpilot.core.disaggregation_plan import phase_scaling
from tokenpilot.core.retune import servable_scale
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
NAME = "chat"
MODEL = "llama-3.1-8b-instruct"
MIX = (6000, 4)  # prompt tokens, output tokens


def service(namespace: str) -> dict[str, Any]:
    body = split_service(namespace)
    spec = body["spec"]
    spec["model"].update(name=MODEL, shape={"preset": "llama-3.1-8b"})
    spec["engine"] = {"maxModelLen": 32768}
    spec["disaggregation"]["prefill"]["tensorParallelSize"] = 2
    return body


def prefill_rate(body: dict[str, Any]) -> float:
    """What one prefill replica carries of the mix at its opening chunk, in requests/s."""
    svc = LLMService.model_validate({**body, "metadata": {**body["metadata"], "generation": 1}})
    prompt, output = MIX
    scaling = phase_scaling(
        svc, by_name=load_builtin_catalog().get, workload=PhaseWorkload(prompt, prompt, output)
    )
    model = scaling.policies[0].replica_model
    assert model is not None
    return servable_scale(model, PhaseWorkload(prompt, prompt, 1).demand(1.0))


def chunk(client: KubeClient, namespace: str, role: str) -> int:
    deployment = client.get(DEPLOYMENTS.path(namespace, f"{NAME}-{role}"))
    assert deployment is not None
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return int(args[args.index("--max-num-batched-tokens") + 1])


@pytest.fixture
def metrics_port() -> int:
    (port,) = metrics_ports(1)
    return port


@pytest.fixture
def operator(
    kubeconfig: Path, namespace: str, client: KubeClient, metrics_port: int
) -> Iterator[None]:
    with operator_thread(kubeconfig, namespace, resync_s=2.0, metrics_port=metrics_port):
        yield
        with contextlib.suppress(NotFound):
            client.request("DELETE", LLMSERVICES.path(namespace, NAME))


def pool_budgets(port: int) -> dict[str, float]:
    page = operator_page(port)
    if page is None:
        return {}
    return {s.labels["phase"]: s.value for s in page.series("tokenpilot_pool_token_budget")}


def test_the_prefill_pool_rolls_to_the_chunk_the_served_mix_calls_for(
    client: KubeClient, namespace: str, operator: None, metrics_port: int
) -> None:
    install_crds(client)
    body = service(namespace)
    rate_per_s = 0.5 * prefill_rate(body)
    create(client, body)

    def both_ready() -> bool:
        pools = get_llms(client, namespace, NAME).get("status", {}).get("pools") or []
        return [p.get("readyReplicas") for p in pools] == [1, 1]

    eventually(both_ready, timeout_s=180, what="one Ready replica in each pool")
    assert chunk(client, namespace, "prefill") == 1024
    decode = client.get(DEPLOYMENTS.path(namespace, f"{NAME}-decode"))
    assert decode is not None
    first_prefill = set(ready_ips(client, namespace, "prefill"))

    with routed(client, namespace, rate_per_s, MIX, MODEL):

        def rolled() -> dict[str, Any] | None:
            status = get_llms(client, namespace, NAME)["status"]
            tuning = status.get("tuning") or {}
            ready = set(ready_ips(client, namespace, "prefill"))
            done = (
                tuning.get("basis") == "Observed"
                and chunk(client, namespace, "prefill") == tuning.get("maxNumBatchedTokens")
                and len(ready) == 1
                and not ready & first_prefill
            )
            return tuning if done else None

        tuning = eventually(
            rolled,
            timeout_s=300,
            interval_s=1.0,
            what=f"the prefill pool rolled to a re-tuned chunk at {rate_per_s:.2f} requests/s",
        )
    assert tuning["maxNumBatchedTokens"] == 4096, tuning
    assert tuning["plannedFor"]["meanPromptTokens"] == pytest.approx(MIX[0], rel=0.02)
    # The decode pool's template is the one it opened on.
    after = client.get(DEPLOYMENTS.path(namespace, f"{NAME}-decode"))
    assert after is not None and after["spec"]["template"] == decode["spec"]["template"]
    retunes = events_of(client, namespace, NAME, "Retuned")
    assert len(retunes) == 1, retunes
    assert "1024 -> 4096" in retunes[0]["message"], retunes[0]["message"]
    eventually(
        lambda: pool_budgets(metrics_port) == {"prefill": 4096, "decode": 1024},
        timeout_s=30,
        what="each pool's budget on the operator's /metrics",
    )
    print(f"at {rate_per_s:.2f} requests/s: Retuned: {retunes[0]['message']}")
    print(f"status.tuning: {tuning}")
