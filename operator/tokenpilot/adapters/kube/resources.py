"""Where each kind the operator touches lives in the API: (group/version, plural, namespaced)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenpilot.api.llmservice import API_VERSION, KIND, PLURAL


@dataclass(frozen=True)
class Resource:
    api_version: str
    plural: str
    namespaced: bool = True

    def base(self) -> str:
        return (
            f"/api/{self.api_version}"
            if "/" not in self.api_version
            else (f"/apis/{self.api_version}")
        )

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        out = self.base()
        if self.namespaced and namespace is not None:
            out += f"/namespaces/{namespace}"
        out += f"/{self.plural}"
        if name is not None:
            out += f"/{name}"
        return out


RESOURCES: dict[tuple[str, str], Resource] = {
    ("apps/v1", "Deployment"): Resource("apps/v1", "deployments"),
    ("apps/v1", "ReplicaSet"): Resource("apps/v1", "replicasets"),
    ("v1", "Service"): Resource("v1", "services"),
    ("v1", "Event"): Resource("v1", "events"),
    ("v1", "Node"): Resource("v1", "nodes", namespaced=False),
    ("v1", "Pod"): Resource("v1", "pods"),
    ("v1", "ConfigMap"): Resource("v1", "configmaps"),
    ("batch/v1", "Job"): Resource("batch/v1", "jobs"),
    ("policy/v1", "PodDisruptionBudget"): Resource("policy/v1", "poddisruptionbudgets"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): Resource(
        "monitoring.coreos.com/v1", "servicemonitors"
    ),
    (API_VERSION, KIND): Resource(API_VERSION, PLURAL),
    ("inference.networking.k8s.io/v1", "InferencePool"): Resource(
        "inference.networking.k8s.io/v1", "inferencepools"
    ),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): Resource(
        "gateway.networking.k8s.io/v1", "httproutes"
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): Resource(
        "apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False
    ),
}

LLMSERVICES = RESOURCES[(API_VERSION, KIND)]
DEPLOYMENTS = RESOURCES[("apps/v1", "Deployment")]
NODES = RESOURCES[("v1", "Node")]
CONFIGMAPS = RESOURCES[("v1", "ConfigMap")]
JOBS = RESOURCES[("batch/v1", "Job")]


def resource_of(manifest: dict[str, Any]) -> Resource:
    key = (manifest["apiVersion"], manifest["kind"])
    try:
        return RESOURCES[key]
    except KeyError:
        raise ValueError(f"no REST mapping for {key[0]} {key[1]}") from None


def path_of(manifest: dict[str, Any]) -> str:
    meta = manifest["metadata"]
    return resource_of(manifest).path(meta.get("namespace"), meta["name"])
