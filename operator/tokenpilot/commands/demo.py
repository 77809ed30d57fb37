"""`tokenpilot demo` (interim): bring the dev cluster up, run a GPU workload on a fake H100 node
as real local processes, show it, and tear everything down.

Bounded: every wait has a timeout, and the cluster is taken down on success, failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import httpx

from tokenpilot.tooling.devcluster import cluster, kube, paths
from tokenpilot.tooling.devcluster.errors import DevClusterError

CLUSTER_PREFIX = "interim-demo-"
NAMESPACE = "demo"
APP = "sample-gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
READY_TIMEOUT_S = 60.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replicas", type=int, default=2, help="replicas of the sample workload")
    parser.add_argument(
        "--keep", action="store_true", help="leave the cluster running at the end (to explore)"
    )


def _say(message: str) -> None:
    print(message, flush=True)


def _deployment(replicas: int) -> dict[str, Any]:
    container = {
        "name": "server",
        # Mapped by the pod runner to a local HTTP server bound to the pod IP.
        "image": "tokenpilot.dev/http-server:1",
        "ports": [{"containerPort": 8080}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": H100},
                    "containers": [container],
                },
            },
        },
    }


def _wait(check: Any, what: str, timeout_s: float = READY_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.25)
    raise DevClusterError(f"demo: timed out after {timeout_s:.0f} s waiting for {what}")


def _table(pods: list[Any], nodes: dict[str, Any]) -> str:
    rows = [("NAME", "READY", "STATUS", "NODE", "GPU", "GPUS", "POD IP")]
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        statuses = pod.status.container_statuses or []
        ready = sum(1 for s in statuses if s.ready)
        node = nodes[pod.spec.node_name]
        gpus = pod.spec.containers[0].resources.limits.get("nvidia.com/gpu", "0")
        rows.append(
            (
                pod.metadata.name,
                f"{ready}/{len(pod.spec.containers)}",
                pod.status.phase,
                pod.spec.node_name,
                node.metadata.labels.get("nvidia.com/gpu.product", "-"),
                gpus,
                pod.status.pod_ip,
            )
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _show_workload(kubeconfig: str, replicas: int) -> None:
    from kubernetes import client

    api = kube.api_client(kubeconfig)
    # The client models mark every field optional; the demo reads what it just created.
    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    _wait(
        lambda: any(
            sa.metadata.name == "default"
            for sa in core.list_namespaced_service_account(NAMESPACE).items
        ),
        "the namespace's default service account",
    )
    _say(f"\n$ deploy {APP}: {replicas} replicas, nvidia.com/gpu: 1 each, on {H100} nodes")
    apps.create_namespaced_deployment(NAMESPACE, _deployment(replicas))
    _wait(
        lambda: (
            (apps.read_namespaced_deployment(APP, NAMESPACE).status.ready_replicas or 0) >= replicas
        ),
        f"{replicas} ready replicas",
    )
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"app={APP}").items
    nodes = {n.metadata.name: n for n in core.list_node().items}
    _say("\n$ kubectl get pods -n demo -o wide\n" + _table(pods, nodes))
    _say("\nEach pod is a real local process listening on its pod IP:")
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        url = f"http://{pod.status.pod_ip}:8080/"
        code = httpx.get(url, timeout=5, trust_env=False).status_code
        _say(f"  GET {url} -> {code}")
    _say("\nGPUs allocated per node (scheduler's accounting):")
    for name, node in sorted(nodes.items()):
        capacity = node.status.allocatable.get("nvidia.com/gpu")
        if capacity is None:
            continue
        used = sum(
            int(p.spec.containers[0].resources.limits.get("nvidia.com/gpu", 0))
            for p in pods
            if p.spec.node_name == name
        )
        _say(f"  {name:<8} {used}/{capacity}  {node.metadata.labels['nvidia.com/gpu.product']}")


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    # A name of its own per run, so a demo never trips over another one running on the machine;
    # a run killed before its teardown is cleaned up by the next.
    name = f"{CLUSTER_PREFIX}{os.getpid()}"
    state_dir = paths.default_state_dir(name)
    try:
        cluster.sweep_orphans(CLUSTER_PREFIX, progress=_say)
        st = cluster.up(
            cluster.UpOptions(name=name, state_dir=state_dir, owner_pid=os.getpid()),
            progress=_say,
        )
    except DevClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        _show_workload(st.kubeconfig, args.replicas)
    except DevClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            _say(
                f"\ncluster left running: export KUBECONFIG={st.kubeconfig}; "
                f"stop it with `tokenpilot dev-cluster down --name {name}`"
            )
        else:
            _say("")
            cluster.down(state_dir, progress=_say)
    _say(f"\ndemo finished in {time.monotonic() - started:.1f} s")
    return 0
