"""A service's engine pods as the metrics sources need them: the Ready ones and their /metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.adapters.metrics.base import PodEndpoint
from tokenpilot.core.render import HTTP_PORT

PODS = RESOURCES[("v1", "Pod")]


def ready_engine_pods(client: KubeClient, namespace: str, selector: str) -> tuple[PodEndpoint, ...]:
    """The Ready, non-terminating pods matching `selector`, by name, with their /metrics URLs."""
    listed = client.request("GET", PODS.path(namespace), query={"labelSelector": selector})
    pods = [pod for pod in listed.get("items", []) if _ready(pod)]
    return tuple(
        PodEndpoint(pod["metadata"]["name"], _metrics_url(pod))
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"])
    )


def _ready(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp") or not pod.get("status", {}).get("podIP"):
        return False
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _metrics_url(pod: Mapping[str, Any]) -> str:
    port = HTTP_PORT
    for container in pod.get("spec", {}).get("containers", [])[:1]:
        for declared in container.get("ports") or []:
            if declared.get("name") == "http":
                port = int(declared["containerPort"])
    return f"http://{pod['status']['podIP']}:{port}/metrics"
