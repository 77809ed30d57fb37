"""The LLMService scale subresource: what `kubectl scale llms/x`, HPA, KEDA and the autoscaler
use to set spec.replicas without touching the rest of the spec; and a disaggregated service's
pools, which the autoscaler sets one field each."""

from __future__ import annotations

from dataclasses import dataclass

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES


@dataclass(frozen=True)
class Scale:
    spec_replicas: int
    status_replicas: int
    selector: str


def read_scale(client: KubeClient, namespace: str, name: str) -> Scale:
    body = client.request("GET", LLMSERVICES.path(namespace, name) + "/scale")
    return Scale(
        spec_replicas=int(body.get("spec", {}).get("replicas", 0)),
        status_replicas=int(body.get("status", {}).get("replicas", 0)),
        selector=str(body.get("status", {}).get("selector", "")),
    )


def write_scale(client: KubeClient, namespace: str, name: str, replicas: int) -> Scale:
    """Set spec.replicas through the scale subresource (a merge patch of one field)."""
    body = client.request(
        "PATCH",
        LLMSERVICES.path(namespace, name) + "/scale",
        body={"spec": {"replicas": replicas}},
        content_type="application/merge-patch+json",
    )
    return Scale(
        spec_replicas=int(body.get("spec", {}).get("replicas", 0)),
        status_replicas=int(body.get("status", {}).get("replicas", 0)),
        selector=str(body.get("status", {}).get("selector", "")),
    )


def write_phase_replicas(
    client: KubeClient, namespace: str, name: str, role: str, replicas: int
) -> None:
    """Set spec.disaggregation.<role>.replicas of a disaggregated service (a merge patch of that
    one field; the reconciler renders the pool's Deployment from it)."""
    client.request(
        "PATCH",
        LLMSERVICES.path(namespace, name),
        body={"spec": {"disaggregation": {role: {"replicas": replicas}}}},
        content_type="application/merge-patch+json",
    )
