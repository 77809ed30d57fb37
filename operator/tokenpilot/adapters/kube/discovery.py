"""Whether an API is served: the operator starts only where the LLMService CRD is installed, and
the ServiceMonitor is rendered only where its CRD is."""

from __future__ import annotations

from tokenpilot.adapters.kube.client import KubeClient, NotFound
from tokenpilot.api.llmservice import API_VERSION, KIND


def is_served(client: KubeClient, api_version: str, kind: str) -> bool:
    """True when `kind` is listed under /apis/<api_version> (or /api/v1)."""
    path = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    try:
        body = client.request("GET", path)
    except NotFound:
        return False
    return any(r.get("kind") == kind for r in body.get("resources", []))


def service_monitor_served(client: KubeClient) -> bool:
    return is_served(client, "monitoring.coreos.com/v1", "ServiceMonitor")


def llmservices_served(client: KubeClient) -> bool:
    """Whether the LLMService CRD is installed and served (KubeError when the API server cannot
    be reached or refuses the credentials)."""
    return is_served(client, API_VERSION, KIND)
