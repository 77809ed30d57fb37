"""A service on several GPU types against the real API server: a Deployment per pool with its
own budget, the split in status and `kubectl get`, pools added and removed, spill-over when the
preferred GPUs are full and the move back when a node of them is added, with a load running
throughout."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _operator_harness import (
    args_of,
    create,
    flag,
    get_deployment,
    get_llms,
    operator_thread,
    patch_spec,
    sample,
)

from tokenpilot.adapters.kube import KubeClient, NotFound
from tokenpilot.adapters.kube.resources import DEPLOYMENTS, LLMSERVICES, NODES, RESOURCES
from tokenpilot.core.render import POOL_LABEL, SERVICE_LABEL
from tokenpilot_lab.devcluster.nodepools import NodePoolFile, render_nodes
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
PODS = RESOURCES[("v1", "Pod")]
H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"
# The dev cluster's H100 nodes: 2 of 8 GPUs (lab/tokenpilot_lab/devcluster/data/nodepools.yaml).
H100_NODES, H100_GPUS_PER_NODE = 2, 8


@pytest.fixture
def operator(kubeconfig: Path, namespace: str) -> Iterator[None]:
    with operator_thread(kubeconfig, namespace, resync_s=2.0):
        yield


def pooled(namespace: str, pools: list[dict[str, Any]], **accelerator: Any) -> dict[str, Any]:
    body = sample("llama-3.1-8b-h100.yaml", namespace)
    body["metadata"]["name"] = "chat"
    spec = body["spec"]
    spec["autoscaling"]["enabled"] = False
    spec["accelerator"] = {"pools": pools, **accelerator}
    spec.pop("batching", None)
    spec["slo"] = {"itlP99": "100ms", "ttftP99": "2s"}
    return body


def pods_of(client: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    items = client.request("GET", PODS.path(namespace), query={"labelSelector": selector})
    return [p for p in items.get("items", []) if not p["metadata"].get("deletionTimestamp")]


def ready_ips(client: KubeClient, namespace: str) -> list[str]:
    out = []
    for pod in pods_of(client, namespace, f"{SERVICE_LABEL}=chat"):
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            out.append(pod["status"]["podIP"])
    return out


def pools_status(client: KubeClient, namespace: str) -> dict[str, dict[str, Any]]:
    status = get_llms(client, namespace, "chat").get("status", {})
    return {p["sku"]: p for p in status.get("pools") or []}


def kubectl_get(kubeconfig: Path, namespace: str) -> str:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "llms", "-n", namespace],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip


class ServiceLoad:
    """Requests to the service's Ready pods, as a Service would spread them: the Ready set is
    read again every half second, and each request goes to the next pod in it."""

    def __init__(self, client: KubeClient, namespace: str, model: str, workers: int = 4) -> None:
        self.ok, self.failed = 0, []  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._ips: list[str] = []
        self._lock = threading.Lock()

        def refresh() -> None:
            while not self._stop.is_set():
                ips = ready_ips(client, namespace)
                with self._lock:
                    self._ips = ips
                self._stop.wait(0.5)

        def worker() -> None:
            turn = itertools.count()
            with httpx.Client(timeout=60, trust_env=False) as http:
                while not self._stop.is_set():
                    with self._lock:
                        ips = list(self._ips)
                    if not ips:
                        self._stop.wait(0.2)
                        continue
                    ip = ips[next(turn) % len(ips)]
                    try:
                        reply = http.post(
                            f"http://{ip}:8000/v1/completions",
                            json={"model": model, "prompt": "hi", "max_tokens": 20},
                        )
                        if reply.status_code == 200:
                            self.ok += 1
                        else:
                            self.failed.append(f"{ip}: HTTP {reply.status_code}")
                    except httpx.HTTPError as error:
                        self.failed.append(f"{ip}: {error!r}")

        self._threads = [threading.Thread(target=refresh, daemon=True)] + [
            threading.Thread(target=worker, daemon=True) for _ in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(70)


def test_each_pool_is_a_deployment_with_its_budget_and_the_split_shows_in_kubectl(
    client: KubeClient, kubeconfig: Path, namespace: str, operator: None
) -> None:
    pools = [
        {"sku": "H100-80GB", "maxReplicas": 1, "pricePerGpuHour": 1.0},
        {"sku": "L40S", "maxReplicas": 4, "pricePerGpuHour": 3.0},
    ]
    body = pooled(namespace, pools)
    body["spec"]["replicas"] = 2  # one H100 is all that pool may have: the rest on L40S
    create(client, body)

    def split_ready() -> dict[str, dict[str, Any]] | None:
        seen = pools_status(client, namespace)
        status = get_llms(client, namespace, "chat").get("status", {})
        done = (
            status.get("phase") == "Ready"
            and seen
            and all(p["readyReplicas"] == p["replicas"] for p in seen.values())
        )
        return seen if done and seen["L40S"]["replicas"] > 0 else None

    seen = eventually(split_ready, timeout_s=120, what="both pools Ready")
    assert seen["H100-80GB"]["replicas"] == 1
    for sku, name in (("H100-80GB", "chat-h100-80gb"), ("L40S", "chat-l40s")):
        deployment = get_deployment(client, namespace, name)
        assert deployment is not None, name
        args = args_of(deployment)
        assert int(flag(args, "--max-num-batched-tokens")) == seen[sku]["maxNumBatchedTokens"]
        assert int(flag(args, "--max-num-seqs")) == seen[sku]["maxNumSeqs"]
    assert seen["H100-80GB"]["maxNumBatchedTokens"] != seen["L40S"]["maxNumBatchedTokens"]
    l40s = seen["L40S"]["replicas"]
    line = kubectl_get(kubeconfig, namespace).splitlines()
    assert "POOLS" in line[0]
    assert f"H100-80GB 1/1, L40S {l40s}/{l40s}" in line[1]
    # The Service selects every pool's pods.
    service = client.get(RESOURCES[("v1", "Service")].path(namespace, "chat"))
    assert service is not None and service["spec"]["selector"] == {SERVICE_LABEL: "chat"}
    assert len(ready_ips(client, namespace)) == 1 + l40s
    # Nothing holds its deletion: no finalizer (kopf puts one on what a kopf timer matches).
    assert not get_llms(client, namespace, "chat")["metadata"].get("finalizers")

    # A pool taken out of the spec takes its Deployment with it.
    patch_spec(client, namespace, "chat", {"accelerator": {"pools": pools[:1]}})
    eventually(
        lambda: get_deployment(client, namespace, "chat-l40s") is None,
        timeout_s=60,
        what="the L40S pool's Deployment deleted",
    )
    # Back to one SKU: the pool Deployments go, the service's own comes back, status.pools goes.
    patch_spec(client, namespace, "chat", {"accelerator": {"pools": None, "sku": "H100-80GB"}})

    def single() -> bool:
        status = get_llms(client, namespace, "chat").get("status", {})
        return (
            get_deployment(client, namespace, "chat") is not None
            and get_deployment(client, namespace, "chat-h100-80gb") is None
            and "pools" not in status
            and "poolsSummary" not in status
        )

    eventually(single, timeout_s=60, what="one Deployment, no status.pools")

    client.request("DELETE", LLMSERVICES.path(namespace, "chat"))
    eventually(
        lambda: (
            not client.request(
                "GET", DEPLOYMENTS.path(namespace), query={"labelSelector": f"{SERVICE_LABEL}=chat"}
            ).get("items")
        ),
        timeout_s=60,
        what="every Deployment of the service collected",
    )


def fill_h100_gpus(client: KubeClient, namespace: str) -> None:
    """Pods that take every H100 GPU of the dev cluster (kwok runs them: no engine)."""
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "h100-tenant", "namespace": namespace},
        "spec": {
            "replicas": H100_NODES,
            "selector": {"matchLabels": {"app": "h100-tenant"}},
            "template": {
                "metadata": {"labels": {"app": "h100-tenant"}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": H100_PRODUCT},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "tenant",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "limits": {"nvidia.com/gpu": str(H100_GPUS_PER_NODE)},
                                "requests": {"nvidia.com/gpu": str(H100_GPUS_PER_NODE)},
                            },
                        }
                    ],
                },
            },
        },
    }
    client.request("POST", DEPLOYMENTS.path(namespace), body=body)

    def all_running() -> bool:
        tenants = pods_of(client, namespace, "app=h100-tenant")
        running = [p for p in tenants if (p.get("status") or {}).get("phase") == "Running"]
        return len(running) == H100_NODES

    eventually(all_running, timeout_s=60, what="every H100 GPU taken by the other tenant")


EXTRA_NODE = "h100-added-0"


def add_h100_node(client: KubeClient) -> None:
    """One more H100 node, registered as the dev cluster registers its own (kwok runs it)."""
    pools = NodePoolFile.model_validate(
        {
            "pools": [
                {
                    "name": "h100-added",
                    "count": 1,
                    "cpu": "96",
                    "memoryGiB": 1024,
                    "gpu": {
                        "product": H100_PRODUCT,
                        "count": H100_GPUS_PER_NODE,
                        "memoryMiB": 81559,
                    },
                }
            ]
        }
    )
    (node,) = render_nodes(pools)
    client.request("POST", NODES.path(), body=node)

    def ready() -> bool:
        found = client.get(NODES.path(name=EXTRA_NODE)) or {}
        conditions = (found.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    eventually(ready, timeout_s=60, what="the added H100 node Ready")


def test_full_h100_nodes_spill_the_share_to_l40s_and_it_moves_back_when_a_node_is_added(
    client: KubeClient, kubeconfig: Path, namespace: str, operator: None
) -> None:
    fill_h100_gpus(client, namespace)
    pools = [
        {"sku": "H100-80GB", "maxReplicas": 2, "pricePerGpuHour": 1.0},
        {"sku": "L40S", "maxReplicas": 4, "pricePerGpuHour": 3.0},
    ]
    body = pooled(namespace, pools, spillOver={"after": "10s", "retryAfter": "30s"})
    body["spec"]["replicas"] = 1
    created = time.monotonic()
    create(client, body)
    model = body["spec"]["model"]["name"]

    def spilled() -> dict[str, dict[str, Any]] | None:
        seen = pools_status(client, namespace)
        h100, l40s = seen.get("H100-80GB"), seen.get("L40S")
        if not h100 or not l40s or h100["state"] != "SpilledOver":
            return None
        return seen if l40s["replicas"] > 0 and l40s["readyReplicas"] == l40s["replicas"] else None

    seen = eventually(spilled, timeout_s=120, what="the H100 share spilled over to L40S, Ready")
    spill_s = time.monotonic() - created
    assert "Insufficient nvidia.com/gpu" in seen["H100-80GB"]["spilledBecause"]
    assert "Insufficient nvidia.com/gpu" in seen["H100-80GB"]["reason"]
    assert seen["H100-80GB"]["replicas"] == 0
    events = client.request(
        "GET",
        RESOURCES[("v1", "Event")].path(namespace),
        query={"fieldSelector": "involvedObject.name=chat"},
    ).get("items", [])
    assert any(e.get("reason") == "PoolSpilledOver" for e in events)

    load = ServiceLoad(client, namespace, model)
    try:
        eventually(lambda: load.ok >= 20, timeout_s=60, what="the load served on L40S")
        # A node of the preferred GPU is added (as a cluster autoscaler would add one).
        add_h100_node(client)
        freed = time.monotonic()

        def back_on_h100() -> dict[str, dict[str, Any]] | None:
            now = pools_status(client, namespace)
            h100, l40s = now["H100-80GB"], now["L40S"]
            on_h100 = h100["state"] == "Serving" and h100["readyReplicas"] == h100["replicas"] > 0
            l40s_pods = pods_of(client, namespace, f"{POOL_LABEL}=l40s")
            return now if on_h100 and l40s["replicas"] == 0 and not l40s_pods else None

        back = eventually(back_on_h100, timeout_s=150, what="the fleet back on H100, L40S drained")
        back_s = time.monotonic() - freed
        served_before_back = load.ok
        eventually(lambda: load.ok >= served_before_back + 20, timeout_s=60, what="served on H100")
    finally:
        load.stop()
        client.request("DELETE", DEPLOYMENTS.path(namespace, "h100-tenant"))
        with contextlib.suppress(NotFound):
            client.request("DELETE", NODES.path(name=EXTRA_NODE))
    print(
        f"spilled and Ready on L40S {spill_s:.1f} s after create; back on H100 {back_s:.1f} s "
        f"after an H100 node was added; {load.ok} requests, {len(load.failed)} failed"
    )
    assert back["H100-80GB"]["replicas"] >= 1
    assert not load.failed, load.failed[:5]
