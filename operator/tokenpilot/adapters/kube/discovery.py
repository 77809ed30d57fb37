"""Whether an API is served: the ServiceMonitor is rendered only when its CRD is installed."""

from __future__ import annotations

from tokenpilot.adapters.kube.client import KubeClient, NotFound


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
