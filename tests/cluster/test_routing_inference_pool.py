"""spec.routing.inferencePool against the real API server and the upstream CRDs (InferencePool
v1.6.0, HTTPRoute of the Gateway API v1.7.0): without them the service says which CRD to
install; with them both objects are accepted, the pool selects exactly the service's engine
pods across its GPU pools, Routed follows status.parents, a bad spec is refused naming the
field, and turning routing off (or deleting the service) removes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _operator_harness import create, get_llms, operator_thread, patch_spec, sample

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.apply import apply
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot.core.render import SERVICE_LABEL
from tokenpilot_lab.devcluster.pytest_plugin import eventually
from tokenpilot_lab.gateway_crds import gateway_api_crds, inference_pool_crd

pytestmark = pytest.mark.cluster
CRDS = RESOURCES[("apiextensions.k8s.io/v1", "CustomResourceDefinition")]
POOLS = RESOURCES[("inference.networking.k8s.io/v1", "InferencePool")]
ROUTES = RESOURCES[("gateway.networking.k8s.io/v1", "HTTPRoute")]
PODS = RESOURCES[("v1", "Pod")]
POOL_CRD = "inferencepools.inference.networking.k8s.io"
ROUTE_CRD = "httproutes.gateway.networking.k8s.io"


def crd_files() -> list[Path]:
    try:
        return [inference_pool_crd(), *gateway_api_crds(("httproutes",))]
    except FileNotFoundError as exc:
        pytest.skip(f"the upstream CRDs cannot be had here: {exc}")


@pytest.fixture
def operator(kubeconfig: Path, namespace: str) -> Iterator[None]:
    with operator_thread(kubeconfig, namespace, resync_s=2.0):
        yield


def routed_service(namespace: str, **routing: Any) -> dict[str, Any]:
    body = sample("llama-3.1-8b-h100.yaml", namespace)
    body["metadata"]["name"] = "chat"
    spec = body["spec"]
    spec["autoscaling"]["enabled"] = False
    spec.pop("batching", None)
    spec["slo"] = {"itlP99": "100ms", "ttftP99": "2s"}
    spec["accelerator"] = {
        "pools": [{"sku": "H100-80GB", "maxReplicas": 2}, {"sku": "L40S", "maxReplicas": 4}]
    }
    spec["replicas"] = 2
    spec["routing"] = {"inferencePool": {"endpointPicker": {"name": "chat-epp"}, **routing}}
    return body


def condition(client: KubeClient, namespace: str, type_: str) -> dict[str, Any] | None:
    status = get_llms(client, namespace, "chat").get("status", {})
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def served(client: KubeClient, name: str) -> bool:
    return client.get(CRDS.path(name=name)) is not None


def test_without_the_crds_the_service_names_what_to_install(
    client: KubeClient, namespace: str, operator: None
) -> None:
    if served(client, POOL_CRD):
        pytest.skip("the InferencePool CRD is installed on this dev cluster already")
    create(client, routed_service(namespace))

    def infeasible() -> dict[str, Any] | None:
        found = condition(client, namespace, "Infeasible")
        return found if found and found["status"] == "True" else None

    found = eventually(infeasible, timeout_s=60, what="Infeasible naming the CRD")
    assert "InferencePool" in found["message"] and "install" in found["message"]
    assert "spec.routing.inferencePool" in found["message"]


def install_crds(client: KubeClient) -> None:
    for path in crd_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                apply(client, doc)

    def established() -> bool:
        for name in (POOL_CRD, ROUTE_CRD):
            body = client.get(CRDS.path(name=name)) or {}
            conditions = (body.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return client.get(POOLS.path("default")) is not None

    eventually(established, timeout_s=60, what="the upstream CRDs established")


def test_the_pool_and_route_are_accepted_select_every_engine_pod_and_follow_the_gateway(
    client: KubeClient, namespace: str, operator: None
) -> None:
    install_crds(client)
    body = routed_service(namespace, httpRoute={"gatewayName": "inference-gateway"})
    create(client, body)

    def both() -> tuple[dict[str, Any], dict[str, Any]] | None:
        pool = client.get(POOLS.path(namespace, "chat"))
        route = client.get(ROUTES.path(namespace, "chat"))
        return (pool, route) if pool and route else None

    pool, route = eventually(both, timeout_s=60, what="InferencePool and HTTPRoute created")
    assert pool["spec"]["selector"]["matchLabels"] == {SERVICE_LABEL: "chat"}
    assert pool["spec"]["endpointPickerRef"]["name"] == "chat-epp"
    (rule,) = route["spec"]["rules"]
    assert rule["backendRefs"][0]["kind"] == "InferencePool"
    assert route["spec"]["parentRefs"][0]["name"] == "inference-gateway"

    def pods_ready() -> list[dict[str, Any]] | None:
        status = get_llms(client, namespace, "chat").get("status", {})
        pools = status.get("pools") or []
        ok = status.get("phase") == "Ready" and pools
        return pools if ok else None

    eventually(pods_ready, timeout_s=120, what="the service Ready")
    # The pool's selector picks exactly the service's engine pods, whichever GPU pool.
    selector = ",".join(f"{k}={v}" for k, v in pool["spec"]["selector"]["matchLabels"].items())
    picked = client.request("GET", PODS.path(namespace), query={"labelSelector": selector})
    every = client.request("GET", PODS.path(namespace))
    engine = [p for p in every["items"] if p["metadata"]["labels"].get(SERVICE_LABEL) == "chat"]
    assert {p["metadata"]["name"] for p in picked["items"]} == {
        p["metadata"]["name"] for p in engine
    }
    assert picked["items"]

    def not_yet() -> dict[str, Any] | None:
        found = condition(client, namespace, "Routed")
        return found if found and found["reason"] == "NotYetAccepted" else None

    found = eventually(not_yet, timeout_s=30, what="Routed NotYetAccepted")
    assert "no Gateway has accepted it yet" in found["message"]

    # A Gateway accepts the pool (written as a Gateway controller writes it; none runs here).
    generation = pool["metadata"]["generation"]
    parent = {
        "parentRef": {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "inference-gateway",
        },
        "conditions": [
            {
                "type": kind,
                "status": "True",
                "reason": kind,
                "message": "",
                "observedGeneration": generation,
                "lastTransitionTime": "2026-12-03T12:00:00Z",
            }
            for kind in ("Accepted", "ResolvedRefs")
        ],
    }
    client.request(
        "PATCH",
        POOLS.path(namespace, "chat") + "/status",
        body={"status": {"parents": [parent]}},
        content_type="application/merge-patch+json",
    )

    def accepted() -> dict[str, Any] | None:
        found = condition(client, namespace, "Routed")
        return found if found and found["status"] == "True" else None

    found = eventually(accepted, timeout_s=30, what="Routed True")
    assert "inference-gateway" in found["message"]

    # A bad routing spec is refused by the API server, naming the field.
    with pytest.raises(KubeError) as refused:
        patch_spec(
            client,
            namespace,
            "chat",
            {"routing": {"inferencePool": {"endpointPicker": {"name": "chat-epp", "port": 0}}}},
        )
    assert refused.value.status == 422
    assert "spec.routing.inferencePool.endpointPicker.port" in refused.value.message

    # The route alone taken away, then routing off: each object goes, and the condition.
    patch_spec(client, namespace, "chat", {"routing": {"inferencePool": {"httpRoute": None}}})
    eventually(
        lambda: client.get(ROUTES.path(namespace, "chat")) is None,
        timeout_s=30,
        what="the HTTPRoute deleted",
    )
    patch_spec(client, namespace, "chat", {"routing": {"inferencePool": None}})
    eventually(
        lambda: (
            client.get(POOLS.path(namespace, "chat")) is None
            and condition(client, namespace, "Routed") is None
        ),
        timeout_s=30,
        what="the InferencePool deleted and Routed gone",
    )

    # On again, then the service deleted: the garbage collector takes the pool.
    patch_spec(
        client,
        namespace,
        "chat",
        {"routing": {"inferencePool": {"endpointPicker": {"name": "chat-epp"}}}},
    )
    eventually(
        lambda: client.get(POOLS.path(namespace, "chat")) is not None,
        timeout_s=30,
        what="the InferencePool again",
    )
    client.request("DELETE", LLMSERVICES.path(namespace, "chat"))
    eventually(
        lambda: client.get(POOLS.path(namespace, "chat")) is None,
        timeout_s=60,
        what="the InferencePool collected with the service",
    )
