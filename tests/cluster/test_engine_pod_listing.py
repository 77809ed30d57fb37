"""The autoscaler's one engine-pod listing per round, against the real API server: every
service's Ready engine pods keyed by namespace and service, so two services of one name in two
namespaces never see each other's engines, and a pod that is not Ready, or belongs to no
service, is nobody's. Listed per watched namespace and across all of them, the answer is the
same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.pods import ready_engine_pods_by_service
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.core.render import HTTP_PORT, SERVICE_LABEL
from tokenpilot_lab.devcluster.pytest_plugin import eventually, make_namespace

pytestmark = pytest.mark.cluster
PODS = RESOURCES[("v1", "Pod")]
SERVICE = "llama-8b"
IMAGE = "soak.example/vllm-openai:fake"  # not in the image map: kwok fakes it, Ready


@pytest.fixture
def second_namespace(k8s_api: Any, namespace: str) -> Iterator[str]:
    with make_namespace(k8s_api, f"{namespace}-b") as name:
        yield name


def pod(name: str, labels: dict[str, str], node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "vllm", "image": IMAGE}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def create(client: KubeClient, namespace: str, body: dict[str, Any]) -> None:
    client.request("POST", PODS.path(namespace), body=body)


def names(
    listed: dict[tuple[str, str], tuple[Any, ...]], namespaces: tuple[str, ...]
) -> dict[tuple[str, str], list[str]]:
    return {
        key: [endpoint.name for endpoint in endpoints]
        for key, endpoints in listed.items()
        if key[0] in namespaces
    }


def test_ready_engine_pods_are_grouped_by_namespace_and_service(
    client: KubeClient, namespace: str, second_namespace: str
) -> None:
    engine = {SERVICE_LABEL: SERVICE}
    create(client, namespace, pod(f"{SERVICE}-b", engine))
    create(client, namespace, pod(f"{SERVICE}-a", engine))
    create(client, namespace, pod("other-0", {SERVICE_LABEL: "other"}))
    create(client, namespace, pod("unlabelled", {"app": SERVICE}))
    # Bound to a node that does not exist: it never turns Ready.
    create(client, namespace, pod(f"{SERVICE}-pending", engine, node="nowhere"))
    create(client, second_namespace, pod(f"{SERVICE}-0", engine))
    ours = (namespace, second_namespace)
    expected = {
        (namespace, SERVICE): [f"{SERVICE}-a", f"{SERVICE}-b"],
        (namespace, "other"): ["other-0"],
        (second_namespace, SERVICE): [f"{SERVICE}-0"],
    }

    def listed_per_namespace() -> dict[tuple[str, str], list[str]] | None:
        found = names(ready_engine_pods_by_service(client, ours), ours)
        return found if found == expected else None

    eventually(listed_per_namespace, timeout_s=60, what=f"the Ready engine pods as {expected}")
    everywhere = names(ready_engine_pods_by_service(client, ()), ours)
    assert everywhere == expected
    endpoint = ready_engine_pods_by_service(client, ours)[(second_namespace, SERVICE)][0]
    assert endpoint.metrics_url.startswith("http://")
    assert endpoint.metrics_url.endswith(f":{HTTP_PORT}/metrics")
