"""A service's engine pods: all of them as the reconciler judges them (core/pod_health.py), and
the Ready ones with their /metrics as the metrics sources need them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.adapters.metrics.base import PodEndpoint
from tokenpilot.core.render import HTTP_PORT

PODS = RESOURCES[("v1", "Pod")]


def engine_pods(client: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Every pod matching `selector`, as the API server returns them."""
    listed = client.request("GET", PODS.path(namespace), query={"labelSelector": selector})
    return list(listed.get("items", []))


def ready_engine_pods(client: KubeClient, namespace: str, selector: str) -> tuple[PodEndpoint, ...]:
    """The Ready, non-terminating pods matching `selector`, by name, with their /metrics URLs."""
    return tuple(
        PodEndpoint(pod["metadata"]["name"], f"{engine_url(pod)}/metrics")
        for pod in ready_pods(client, namespace, selector)
    )


def ready_pods(client: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The Ready, non-terminating pods matching `selector` (with a pod IP), by name."""
    pods = [pod for pod in engine_pods(client, namespace, selector) if _ready(pod)]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def engine_url(pod: Mapping[str, Any]) -> str:
    """http://<pod IP>:<its declared `http` port, else the rendered one>."""
    port = HTTP_PORT
    for container in pod.get("spec", {}).get("containers", [])[:1]:
        for declared in container.get("ports") or []:
            if declared.get("name") == "http":
                port = int(declared["containerPort"])
    return f"http://{pod['status']['podIP']}:{port}"


def _ready(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp") or not pod.get("status", {}).get("podIP"):
        return False
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
