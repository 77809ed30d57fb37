"""Events about an LLMService, shown by `kubectl describe llms/x`."""

from __future__ import annotations

from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.api.llmservice import API_VERSION, KIND
from tokenpilot.core.service_event import ServiceEvent

COMPONENT = "tokenpilot-operator"


def post_event(
    client: KubeClient,
    *,
    namespace: str,
    name: str,
    uid: str,
    event: ServiceEvent,
    now: str,
) -> None:
    """Record one Event on the LLMService (core/v1, so every kubectl shows it)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": name,
            "namespace": namespace,
            "uid": uid,
        },
        "reason": event.reason,
        "message": event.message[:1024],
        "type": "Warning" if event.warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    client.request("POST", RESOURCES[("v1", "Event")].path(namespace), body=body)
