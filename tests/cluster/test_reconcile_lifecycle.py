"""The operator against the real API server: create, roll, scale, drift, idle, Infeasible."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _operator_harness import (
    api_writes,
    args_of,
    create,
    flag,
    get_deployment,
    get_llms,
    operator_thread,
    patch_spec,
    resource_versions,
    sample,
)

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.apiserver_metrics import write_delta
from tokenpilot.adapters.kube.events import COMPONENT
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.adapters.kube.scale import read_scale, write_scale
from tokenpilot.api.llmservice import GROUP
from tokenpilot_lab.devcluster.pytest_plugin import eventually, stays

pytestmark = pytest.mark.cluster
H100 = "llama-3.1-8b-h100.yaml"
L40S = "llama-3.1-8b-l40s.yaml"


@pytest.fixture
def operator(kubeconfig: Path, namespace: str, client: KubeClient) -> Iterator[None]:
    with operator_thread(kubeconfig, namespace, resync_s=2.0):
        yield


def ready(client: KubeClient, namespace: str, name: str, replicas: int) -> dict[str, Any] | None:
    status = get_llms(client, namespace, name).get("status", {})
    if status.get("phase") == "Ready" and status.get("readyReplicas") == replicas:
        return status
    return None


def reaction_complete(client: KubeClient, namespace: str, name: str, reason: str) -> bool:
    """The operator has posted its Event `reason` about `name`, and kopf has recorded the spec
    it handled (the last write of a create, after the handler's status and Event)."""
    annotations = get_llms(client, namespace, name)["metadata"].get("annotations") or {}
    events = client.request(
        "GET",
        RESOURCES[("v1", "Event")].path(namespace),
        query={"fieldSelector": f"involvedObject.name={name}"},
    ).get("items", [])
    posted = any(
        e.get("reason") == reason and e.get("reportingComponent") == COMPONENT for e in events
    )
    return posted and f"{GROUP}/last-handled-configuration" in annotations


def pods(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.request(
        "GET", RESOURCES[("v1", "Pod")].path(namespace)
    ).get("items", [])
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def test_sample_becomes_ready_on_h100_nodes(
    client: KubeClient, kubeconfig: Path, namespace: str, operator: None
) -> None:
    body = sample(H100, namespace)
    # This test is about the reconciler: keep the autoscaler out of it.
    body["spec"]["autoscaling"]["enabled"] = False
    create(client, body)
    status = eventually(
        lambda: ready(client, namespace, "llama-8b", 2), timeout_s=90, what="llama-8b Ready 2/2"
    )
    assert status["tuning"]["sku"] == "H100-80GB"
    assert status["tuning"]["maxNumBatchedTokens"] > 0
    for kind in (("v1", "Service"), ("policy/v1", "PodDisruptionBudget")):
        assert client.get(RESOURCES[kind].path(namespace, "llama-8b")) is not None
    running = [p for p in pods(client, namespace) if p["status"].get("phase") == "Running"]
    assert len(running) == 2
    assert all(p["spec"]["nodeName"].startswith("h100-") for p in running)
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "llms", "-n", namespace],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    row = out.splitlines()[1].split()
    assert row[:6] == ["llama-8b", "llama-3.1-8b-instruct", "H100-80GB", "2", "2",
                       str(status["tuning"]["maxNumBatchedTokens"])]  # fmt: skip


def test_budget_and_sku_changes_roll_the_deployment(
    client: KubeClient, namespace: str, operator: None
) -> None:
    create(client, sample(L40S, namespace))
    eventually(lambda: ready(client, namespace, "llama-8b-l40s", 1), timeout_s=90, what="Ready")
    before = get_deployment(client, namespace, "llama-8b-l40s")
    assert before is not None

    patch_spec(client, namespace, "llama-8b-l40s", {"batching": {"maxNumBatchedTokens": 1024}})

    def rolled_budget() -> dict[str, Any] | None:
        d = get_deployment(client, namespace, "llama-8b-l40s")
        return d if d and flag(args_of(d), "--max-num-batched-tokens") == "1024" else None

    after = eventually(rolled_budget, timeout_s=30, what="the new budget in the Deployment")
    assert after["metadata"]["generation"] > before["metadata"]["generation"]
    eventually(lambda: ready(client, namespace, "llama-8b-l40s", 1), timeout_s=90, what="Ready")

    patch_spec(client, namespace, "llama-8b-l40s", {"accelerator": {"sku": "H100-80GB"}})

    def on_h100() -> bool:
        d = get_deployment(client, namespace, "llama-8b-l40s") or {}
        affinity = d["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
        return "NVIDIA-H100-80GB-HBM3" in term["matchExpressions"][0]["values"]

    eventually(on_h100, timeout_s=30, what="H100 affinity on the Deployment")
    eventually(
        lambda: all(p["spec"].get("nodeName", "").startswith("h100-")
                    for p in pods(client, namespace)) and ready(client, namespace,
                                                                "llama-8b-l40s", 1),
        timeout_s=120, what="the pods rolled onto H100 nodes",
    )  # fmt: skip


def test_idle_resync_writes_nothing(client: KubeClient, namespace: str, operator: None) -> None:
    create(client, sample(L40S, namespace))
    eventually(lambda: ready(client, namespace, "llama-8b-l40s", 1), timeout_s=90, what="Ready")
    # The last status and Events land just after Ready: start counting once two reads a
    # resync apart agree.
    settled: list[dict[str, str]] = []

    def quiet() -> bool:
        settled.append(resource_versions(client, namespace))
        return len(settled) > 1 and settled[-1] == settled[-2]

    eventually(quiet, timeout_s=30, interval_s=2.0, what="the last writes of the reconcile")
    writes, versions = api_writes(client), resource_versions(client, namespace)
    stays(
        lambda: (
            write_delta(writes, api_writes(client)) == {}
            and resource_versions(client, namespace) == versions
        ),
        for_s=7.0,
        what="no write over three resync passes at 2 s",
    )


def test_hand_edit_of_the_deployment_comes_back(
    client: KubeClient, namespace: str, operator: None
) -> None:
    create(client, sample(L40S, namespace))
    eventually(lambda: ready(client, namespace, "llama-8b-l40s", 1), timeout_s=90, what="Ready")
    deployments = RESOURCES[("apps/v1", "Deployment")]
    client.request(
        "PATCH",
        deployments.path(namespace, "llama-8b-l40s"),
        body={"spec": {"template": {"spec": {"containers": [
            {"name": "vllm", "image": "vllm/vllm-openai:hand-edited"}]}}}},
        content_type="application/strategic-merge-patch+json",
        query={"fieldManager": "someone"},
    )  # fmt: skip

    def restored() -> bool:
        d = get_deployment(client, namespace, "llama-8b-l40s") or {}
        image = d["spec"]["template"]["spec"]["containers"][0]["image"]
        return bool(image == "vllm/vllm-openai:v0.32.0")

    eventually(restored, timeout_s=30, what="the operator to undo the hand edit")

    uid = (get_deployment(client, namespace, "llama-8b-l40s") or {})["metadata"]["uid"]
    client.request("DELETE", deployments.path(namespace, "llama-8b-l40s"))

    def recreated() -> bool:
        d = get_deployment(client, namespace, "llama-8b-l40s")
        return d is not None and d["metadata"]["uid"] != uid

    eventually(recreated, timeout_s=30, what="the operator to recreate a deleted Deployment")


def test_scale_subresource_drives_the_deployment(
    client: KubeClient, namespace: str, operator: None
) -> None:
    create(client, sample(L40S, namespace))
    eventually(lambda: ready(client, namespace, "llama-8b-l40s", 1), timeout_s=90, what="Ready")
    write_scale(client, namespace, "llama-8b-l40s", 3)
    eventually(lambda: ready(client, namespace, "llama-8b-l40s", 3), timeout_s=90, what="3 ready")
    scale = read_scale(client, namespace, "llama-8b-l40s")
    assert (scale.spec_replicas, scale.status_replicas) == (3, 3)
    assert scale.selector == "serving.tokenpilot.dev/llmservice=llama-8b-l40s"
    deployment = get_deployment(client, namespace, "llama-8b-l40s")
    assert deployment is not None and deployment["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"accelerator": {"sku": "B200"}}, "unknown GPU 'B200'"),
        ({"accelerator": {"sku": "A100-80GB"}}, "no node can host accelerator.sku A100-80GB"),
        (
            {"accelerator": {"sku": "L40S"}, "model": {"shape": {"preset": "llama-3.1-70b"}}},
            "set tensorParallelSize to 4",
        ),
        ({"engine": {"extraArgs": ["--max-num-seqs=4"]}}, "extraArgs sets --max-num-seqs"),
        (
            {"accelerator": {"tolerations": [{"key": "not a key!", "operator": "Exists"}]}},
            "the API server refused the Deployment",
        ),
    ],
    ids=["unknown-sku", "no-node", "weights-do-not-fit", "operator-owned-flag", "refused"],
)
def test_operator_judgements_end_infeasible(
    client: KubeClient, namespace: str, operator: None, spec: dict[str, Any], needle: str
) -> None:
    body = sample(L40S, namespace)
    for key, value in spec.items():
        body["spec"][key] = {**body["spec"].get(key, {}), **value}
    create(client, body)

    def infeasible() -> dict[str, Any] | None:
        status = get_llms(client, namespace, "llama-8b-l40s").get("status", {})
        return status if status.get("phase") == "Infeasible" else None

    status = eventually(infeasible, timeout_s=30, what="phase Infeasible")
    condition = next(c for c in status["conditions"] if c["type"] == "Infeasible")
    assert condition["status"] == "True" and needle in condition["message"]
    assert get_deployment(client, namespace, "llama-8b-l40s") is None
    # The status comes first; the Event and kopf's record of the handled spec follow it within
    # milliseconds. Counting starts once they are in, or a poll landing between would count
    # them as a loop.
    eventually(
        lambda: reaction_complete(client, namespace, "llama-8b-l40s", "PhaseInfeasible"),
        timeout_s=30,
        what="the PhaseInfeasible Event and kopf's record of the handled spec",
    )
    # No crash loop: nothing more is written while the spec stays as it is.
    versions = resource_versions(client, namespace)
    stays(
        lambda: resource_versions(client, namespace) == versions,
        for_s=5.0,
        what="no write while the Infeasible spec stays",
    )


def test_infeasible_spec_recovers_when_fixed(
    client: KubeClient, namespace: str, operator: None
) -> None:
    body = sample(L40S, namespace)
    body["spec"]["accelerator"]["sku"] = "B200"
    create(client, body)
    eventually(
        lambda: (
            get_llms(client, namespace, "llama-8b-l40s").get("status", {}).get("phase")
            == "Infeasible"
        ),
        timeout_s=30,
        what="phase Infeasible",
    )
    patch_spec(client, namespace, "llama-8b-l40s", {"accelerator": {"sku": "L40S"}})
    status = eventually(
        lambda: ready(client, namespace, "llama-8b-l40s", 1), timeout_s=90, what="Ready once fixed"
    )
    infeasible = next(c for c in status["conditions"] if c["type"] == "Infeasible")
    assert infeasible["status"] == "False"
