"""A service's engine pods: all of them as the reconciler judges them (core/pod_health.py), and
the Ready ones with their /metrics as the metrics sources need them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.llmservices import list_in
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.adapters.metrics.base import PodEndpoint
from tokenpilot.core.render import HTTP_PORT, POOL_LABEL, SERVICE_LABEL, selected_by

PODS = RESOURCES[("v1", "Pod")]


def engine_pods(client: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Every pod matching `selector`, as the API server returns them."""
    listed = client.request("GET", PODS.path(namespace), query={"labelSelector": selector})
    return list(listed.get("items", []))


def ready_engine_pods(client: KubeClient, namespace: str, selector: str) -> tuple[PodEndpoint, ...]:
    """The Ready, non-terminating pods matching `selector`, by name, with their /metrics URLs."""
    return _endpoints(ready_pods(client, namespace, selector))


def ready_engine_pods_by_service(
    client: KubeClient, namespaces: Sequence[str]
) -> dict[tuple[str, str], tuple[PodEndpoint, ...]]:
    """The Ready engine pods of every LLMService in `namespaces` (all namespaces when empty),
    keyed by (namespace, service) and sorted by name: one listing per namespace, not one per
    service, so a round of the autoscaler costs the API server the same at 1 or 1,000 services."""
    engines = list_in(client, PODS, namespaces, query=ENGINE_PODS)
    return by_service(filter(None, map(engine_endpoint, engines)))


# The query that picks every engine pod: those with a service label.
ENGINE_PODS = {"labelSelector": SERVICE_LABEL}

ServiceEndpoint = tuple[tuple[str, str], PodEndpoint]


def engine_endpoint(pod: Mapping[str, Any]) -> ServiceEndpoint | None:
    """(namespace, service) and the endpoint of a Ready engine pod; None for a pod that is not
    Ready, is terminating, or serves no service (what a cache of Ready engine pods keeps)."""
    if not _ready(pod):
        return None
    meta = pod["metadata"]
    service = selected_by(meta.get("labels") or {})
    if service is None:
        return None
    return (meta["namespace"], service), _endpoints([pod])[0]


def by_service(
    endpoints: Iterable[ServiceEndpoint],
) -> dict[tuple[str, str], tuple[PodEndpoint, ...]]:
    """Endpoints grouped by (namespace, service), each group sorted by pod name."""
    grouped: dict[tuple[str, str], list[PodEndpoint]] = {}
    for key, endpoint in endpoints:
        grouped.setdefault(key, []).append(endpoint)
    return {key: tuple(sorted(group, key=lambda e: e.name)) for key, group in grouped.items()}


def ready_pods(client: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The Ready, non-terminating pods matching `selector` (with a pod IP), by name."""
    return _by_name([pod for pod in engine_pods(client, namespace, selector) if _ready(pod)])


def engine_url(pod: Mapping[str, Any]) -> str:
    """http://<pod IP>:<the engine's declared port, else the rendered one>: its `engine` port
    where a routing sidecar fronts it (a decode pod), so the autoscaler reads the engine
    itself, else its `http` port."""
    declared = {
        port.get("name"): int(port["containerPort"])
        for container in pod.get("spec", {}).get("containers", [])[:1]
        for port in container.get("ports") or []
    }
    port = declared.get("engine") or declared.get("http") or HTTP_PORT
    return f"http://{pod['status']['podIP']}:{port}"


def _ready(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp") or not pod.get("status", {}).get("podIP"):
        return False
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _by_name(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def _endpoints(pods: Sequence[Mapping[str, Any]]) -> tuple[PodEndpoint, ...]:
    return tuple(
        PodEndpoint(
            pod["metadata"]["name"],
            f"{engine_url(pod)}/metrics",
            startup_s(pod),
            batching(pod),
            (pod["metadata"].get("labels") or {}).get(POOL_LABEL),
        )
        for pod in pods
    )


def batching(pod: Mapping[str, Any]) -> tuple[int, int] | None:
    """(token budget, max_num_seqs) from the engine container's `vllm serve` arguments."""
    for container in pod.get("spec", {}).get("containers", [])[:1]:
        args = [str(a) for a in container.get("args") or []]
        budget, seqs = _flag(args, "--max-num-batched-tokens"), _flag(args, "--max-num-seqs")
        if budget is not None and seqs is not None:
            return budget, seqs
    return None


def _flag(args: list[str], name: str) -> int | None:
    for index, arg in enumerate(args):
        text = arg.removeprefix(f"{name}=") if arg.startswith(f"{name}=") else None
        if arg == name and index + 1 < len(args):
            text = args[index + 1]
        if text is not None:
            try:
                return int(text)
            except ValueError:
                return None
    return None


def startup_s(pod: Mapping[str, Any]) -> float | None:
    """Seconds from the pod's creation to its Ready condition's last transition (image pull,
    weights, CUDA graphs, the first health check); None where either time is missing."""
    created = _time(pod.get("metadata", {}).get("creationTimestamp"))
    conditions = pod.get("status", {}).get("conditions") or []
    ready: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    became_ready = _time(ready.get("lastTransitionTime"))
    if created is None or became_ready is None:
        return None
    return max(0.0, (became_ready - created).total_seconds())


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
