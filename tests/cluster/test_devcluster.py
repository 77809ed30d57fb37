"""The dev cluster behaves like a cluster with GPU nodes: scheduling on GPU capacity and node
labels, loopback pod IPs, garbage collection, and pods whose images run as local processes with
readiness that follows their real probe."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from typing import Any

import httpx
import pytest
from kubernetes import client

from devcluster_checks import answers
from tokenpilot_lab.devcluster.pytest_plugin import DevCluster, eventually, stays

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def _deployment(name: str, *, product: str, gpus: int, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": product},
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }


def _http_pod(name: str, probe_path: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "tokenpilot.dev/http-server:1",
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {
                        "httpGet": {"path": probe_path, "port": 8080},
                        "periodSeconds": 1,
                    },
                }
            ]
        },
    }


def _pods(core: client.CoreV1Api, namespace: str, selector: str = "") -> list[Any]:
    return list(core.list_namespaced_pod(namespace, label_selector=selector).items)


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_nodes_carry_gpu_labels_and_capacity(k8s_api: Any) -> None:
    nodes = {n.metadata.name: n for n in client.CoreV1Api(k8s_api).list_node().items}
    assert set(nodes) >= {"h100-0", "h100-1", "l40s-0", "cpu-0"}
    for name, product, count in (
        ("h100-0", "NVIDIA-H100-80GB-HBM3", "8"),
        ("h100-1", "NVIDIA-H100-80GB-HBM3", "8"),
        ("l40s-0", "NVIDIA-L40S", "4"),
    ):
        node = nodes[name]
        assert node.metadata.labels["nvidia.com/gpu.product"] == product
        assert node.metadata.labels["nvidia.com/gpu.count"] == count
        assert int(node.metadata.labels["nvidia.com/gpu.memory"]) > 40_000
        assert node.status.capacity["nvidia.com/gpu"] == count
        assert node.status.allocatable["nvidia.com/gpu"] == count
    assert "nvidia.com/gpu" not in (nodes["cpu-0"].status.capacity or {})
    assert all(_ready(n) for n in nodes.values())


def test_kubectl_lists_the_gpu_nodes(dev_cluster: DevCluster) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not on PATH; install it (the dev cluster is v1.33)"
    result = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(dev_cluster.kubeconfig),
            "get",
            "nodes",
            "-L",
            "nvidia.com/gpu.product",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert "NVIDIA-L40S" in rows["l40s-0"]
    assert "NVIDIA-H100-80GB-HBM3" in rows["h100-1"]
    assert " Ready " in rows["cpu-0"]


def test_gpu_deployment_runs_on_the_l40s_node_and_is_garbage_collected(
    k8s_api: Any, namespace: str
) -> None:
    apps = client.AppsV1Api(k8s_api)
    core = client.CoreV1Api(k8s_api)
    apps.create_namespaced_deployment(
        namespace, _deployment("l40s-app", product="NVIDIA-L40S", gpus=1, replicas=3)
    )

    def running() -> list[Any] | None:
        pods = _pods(core, namespace, "app=l40s-app")
        ok = len(pods) == 3 and all(p.status.phase == "Running" for p in pods)
        return pods if ok else None

    pods = eventually(running, timeout_s=30, what="3 Running pods")
    for pod in pods:
        assert pod.spec.node_name == "l40s-0"
        assert ipaddress.ip_address(pod.status.pod_ip) in LOOPBACK
    assert len({p.status.pod_ip for p in pods}) == 3

    apps.delete_namespaced_deployment("l40s-app", namespace, propagation_policy="Background")
    eventually(
        lambda: not _pods(core, namespace, "app=l40s-app"), timeout_s=30, what="pods collected"
    )


def test_gpu_requests_beyond_capacity_stay_pending(k8s_api: Any, namespace: str) -> None:
    """The L40S node has 4 GPUs: a 3-GPU pod fits once, the second one cannot be scheduled."""
    apps = client.AppsV1Api(k8s_api)
    core = client.CoreV1Api(k8s_api)
    apps.create_namespaced_deployment(
        namespace, _deployment("big", product="NVIDIA-L40S", gpus=3, replicas=2)
    )

    def one_running_one_unschedulable() -> bool:
        pods = _pods(core, namespace, "app=big")
        phases = sorted(p.status.phase for p in pods)
        unschedulable = any(
            c.reason == "Unschedulable" and "nvidia.com/gpu" in (c.message or "")
            for p in pods
            for c in p.status.conditions or []
        )
        return phases == ["Pending", "Running"] and unschedulable

    eventually(one_running_one_unschedulable, timeout_s=30, what="one pod Insufficient GPU")


def test_mapped_image_runs_locally_and_readiness_follows_its_probe(
    k8s_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_pod(namespace, _http_pod("good", "/"))
    core.create_namespaced_pod(namespace, _http_pod("bad-probe", "/no-such-path"))

    good = eventually(
        lambda: (p := core.read_namespaced_pod("good", namespace)) and _ready(p) and p,
        timeout_s=30,
        what="pod good Ready",
    )
    response = httpx.get(f"http://{good.status.pod_ip}:8080/", timeout=5, trust_env=False)
    assert response.status_code == 200

    bad = core.read_namespaced_pod("bad-probe", namespace)
    assert ipaddress.ip_address(bad.status.pod_ip) in LOOPBACK
    # The server answers on the pod IP, but not on the probe path: never Ready.
    eventually(
        lambda: answers(f"http://{bad.status.pod_ip}:8080/"),
        timeout_s=15,
        what="bad-probe's server to answer on /",
    )

    # Asserting that something does not happen needs a window: three probe periods.
    def running_unready() -> bool:
        pod = core.read_namespaced_pod("bad-probe", namespace)
        return not _ready(pod) and pod.status.container_statuses[0].state.running is not None

    stays(running_unready, for_s=3.0, what="bad-probe running but not Ready")
    bad = core.read_namespaced_pod("bad-probe", namespace)
    ready = next(c for c in bad.status.conditions if c.type == "Ready")
    assert ready.reason == "ContainersNotReady"


def test_deleting_a_mapped_pod_stops_its_process(k8s_api: Any, namespace: str) -> None:
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_pod(namespace, _http_pod("short-lived", "/"))
    pod = eventually(
        lambda: (p := core.read_namespaced_pod("short-lived", namespace)) and _ready(p) and p,
        timeout_s=30,
        what="pod Ready",
    )
    url = f"http://{pod.status.pod_ip}:8080/"
    core.delete_namespaced_pod("short-lived", namespace)

    def refused() -> bool:
        try:
            httpx.get(url, timeout=1, trust_env=False)
        except httpx.ConnectError:
            return True
        except httpx.TransportError:
            # Caught mid-shutdown (connection reset, read cut short): stopping, not stopped yet.
            return False
        return False

    eventually(refused, timeout_s=30, what="the local server to stop")


@pytest.mark.parametrize("image", ["registry.k8s.io/pause:3.10", "nginx:1.27"])
def test_unmapped_images_stay_kwok_fakes(k8s_api: Any, namespace: str, image: str) -> None:
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_pod(
        namespace,
        {"metadata": {"name": "fake"}, "spec": {"containers": [{"name": "c", "image": image}]}},
    )
    pod = eventually(
        lambda: (p := core.read_namespaced_pod("fake", namespace)) and _ready(p) and p,
        timeout_s=30,
        what="fake pod Ready",
    )
    assert pod.status.phase == "Running"


def test_vllm_image_runs_the_engine_simulator_with_its_args(k8s_api: Any, namespace: str) -> None:
    """A Deployment rendered for a real cluster (vLLM image, vLLM args) runs here unchanged."""
    apps = client.AppsV1Api(k8s_api)
    core = client.CoreV1Api(k8s_api)
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.10.1",
        "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "16"],
        "ports": [{"name": "http", "containerPort": 8000}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
    }
    deployment = _deployment("engine", product="NVIDIA-H100-80GB-HBM3", gpus=1, replicas=1)
    deployment["spec"]["template"]["spec"]["containers"] = [container]
    apps.create_namespaced_deployment(namespace, deployment)

    def ready_pod() -> Any:
        pods = _pods(core, namespace, "app=engine")
        return pods[0] if len(pods) == 1 and _ready(pods[0]) else None

    pod = eventually(ready_pod, timeout_s=60, what="the engine pod Ready")
    assert pod.spec.node_name.startswith("h100-")
    models = httpx.get(f"http://{pod.status.pod_ip}:8000/v1/models", timeout=5, trust_env=False)
    assert models.status_code == 200
    assert "meta-llama/Llama-3.1-8B-Instruct" in models.text
