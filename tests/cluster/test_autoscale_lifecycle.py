"""The autoscaler's footprint on the objects it scales: no finalizer, so an autoscaled LLMService
is deleted (and its Deployment collected) with the operator stopped; and an engine whose
/metrics answers garbage holds the replicas with a MetricsAvailable condition that says why,
while the operator goes on serving every other service."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _operator_harness import (
    create,
    get_deployment,
    get_llms,
    operator_thread,
    sample,
)

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
NAME = "llama-8b"
PODS = RESOURCES[("v1", "Pod")]
GARBAGE_PORT = 18931


def autoscaled(namespace: str, name: str = NAME) -> dict[str, Any]:
    body = sample("llama-3.1-8b-h100.yaml", namespace)
    body["metadata"]["name"] = name
    body["spec"]["replicas"] = 1
    body["spec"]["autoscaling"].update(
        {"enabled": True, "minReplicas": 1, "maxReplicas": 2, "interval": "1s"}
    )
    return body


def condition(
    client: KubeClient, namespace: str, type_: str, name: str = NAME
) -> dict[str, Any] | None:
    status = get_llms(client, namespace, name).get("status", {})
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


def test_autoscaled_service_deletes_with_the_operator_stopped(
    kubeconfig: Path, namespace: str, client: KubeClient
) -> None:
    with operator_thread(kubeconfig, namespace):
        create(client, autoscaled(namespace))
        eventually(
            lambda: get_llms(client, namespace, NAME).get("status", {}).get("autoscaling"),
            timeout_s=120,
            what="the autoscaler's first decision in status",
        )
        # The autoscaler's loop and the reconciler run apart: either may write first.
        eventually(
            lambda: get_deployment(client, namespace, NAME),
            timeout_s=60,
            what="the reconciler's Deployment",
        )
    # The operator is down now.
    assert not get_llms(client, namespace, NAME)["metadata"].get("finalizers")
    client.request("DELETE", LLMSERVICES.path(namespace, NAME))
    eventually(
        lambda: client.get(LLMSERVICES.path(namespace, NAME)) is None,
        timeout_s=30,
        what="the LLMService to be gone without an operator",
    )
    eventually(
        lambda: get_deployment(client, namespace, NAME) is None,
        timeout_s=60,
        what="the garbage collector to remove the Deployment",
    )


class Garbage(http.server.BaseHTTPRequestHandler):
    """What a broken proxy in front of an engine answers: 200 and an HTML page."""

    def do_GET(self) -> None:
        body = b"<html><body>upstream gone</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def garbage_server() -> Iterator[list[http.server.ThreadingHTTPServer]]:
    servers: list[http.server.ThreadingHTTPServer] = []
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def garbage_pod(engine: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """A Ready pod the service's selector finds, whose /metrics port answers garbage.

    It is owned (as controller) by the LLMService so the ReplicaSet does not adopt it, and it
    runs the dev cluster's small HTTP server for its readiness probe on its first port.
    """
    meta = owner["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{NAME}-garbage",
            "namespace": meta["namespace"],
            "labels": dict(engine["metadata"]["labels"]),
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": engine["spec"]["nodeName"],
            "tolerations": engine["spec"].get("tolerations", []),
            "containers": [
                {
                    "name": "web",
                    "image": "tokenpilot.dev/http-server:1",
                    "ports": [
                        {"name": "probe", "containerPort": 8080},
                        {"name": "http", "containerPort": GARBAGE_PORT},
                    ],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8080}},
                }
            ],
        },
    }


def test_engine_answering_garbage_holds_replicas_and_says_why(
    kubeconfig: Path,
    namespace: str,
    client: KubeClient,
    garbage_server: list[http.server.ThreadingHTTPServer],
) -> None:
    with operator_thread(kubeconfig, namespace):
        create(client, autoscaled(namespace))

        def readable() -> bool:
            found = condition(client, namespace, "MetricsAvailable")
            return found is not None and found["status"] == "True"

        eventually(readable, timeout_s=120, what="MetricsAvailable=True on a healthy engine")
        engine = next(
            pod
            for pod in client.request("GET", PODS.path(namespace)).get("items", [])
            if pod["metadata"]["name"].startswith(NAME)
        )
        owner = get_llms(client, namespace, NAME)
        client.request("POST", PODS.path(namespace), body=garbage_pod(engine, owner))

        def pod_ip() -> str | None:
            pod = client.get(PODS.path(namespace, f"{NAME}-garbage")) or {}
            ip = pod.get("status", {}).get("podIP")
            return str(ip) if ip else None

        ip = eventually(pod_ip, timeout_s=60, what="the garbage pod's IP")
        server = http.server.ThreadingHTTPServer((ip, GARBAGE_PORT), Garbage)
        garbage_server.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()

        def blind() -> dict[str, Any] | None:
            found = condition(client, namespace, "MetricsAvailable")
            return found if found is not None and found["status"] == "False" else None

        found = eventually(blind, timeout_s=60, what="MetricsAvailable=False")
        assert found["reason"] == "PartialScrape", found
        assert f":{GARBAGE_PORT}/metrics" in found["message"], found
        assert "replicas held at 1" in found["message"], found
        service = get_llms(client, namespace, NAME)
        assert service["spec"]["replicas"] == 1
        assert found["observedGeneration"] == service["metadata"]["generation"]

        # One blind service holds only itself: a service created now is reconciled, its engine
        # read and judged, while the first stays blind.
        other = "llama-8b-other"
        create(client, autoscaled(namespace, other))

        def other_served() -> bool:
            phase = get_llms(client, namespace, other).get("status", {}).get("phase")
            read = condition(client, namespace, "MetricsAvailable", other)
            return phase == "Ready" and read is not None and read["status"] == "True"

        eventually(other_served, timeout_s=120, what=f"{other} Ready with its metrics read")
        still = condition(client, namespace, "MetricsAvailable")
        assert still is not None and still["status"] == "False", still
