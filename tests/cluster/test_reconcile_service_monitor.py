"""A ServiceMonitor is rendered only when the cluster serves that API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from _operator_harness import REPO, client_for, create, install_crd, operator_thread, sample

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.apply import apply
from tokenpilot.adapters.kube.discovery import service_monitor_served
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
MONITORS = RESOURCES[("monitoring.coreos.com/v1", "ServiceMonitor")]
CRDS = RESOURCES[("apiextensions.k8s.io/v1", "CustomResourceDefinition")]
STAND_IN = REPO / "e2e" / "crds" / "monitoring.coreos.com_servicemonitors.yaml"


@pytest.fixture
def monitoring_api(kubeconfig: Path) -> Iterator[KubeClient]:
    client = client_for(kubeconfig)
    install_crd(client)
    was_served = service_monitor_served(client)
    if not was_served:
        apply(client, yaml.safe_load(STAND_IN.read_text()))
        eventually(lambda: service_monitor_served(client), timeout_s=30, what="ServiceMonitor API")
    yield client
    if not was_served:
        client.request("DELETE", CRDS.path(name="servicemonitors.monitoring.coreos.com"))


def test_service_monitor_when_the_api_is_served(
    monitoring_api: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    with operator_thread(kubeconfig, namespace):
        create(monitoring_api, sample("llama-3.1-8b-l40s.yaml", namespace))
        monitor = eventually(
            lambda: monitoring_api.get(MONITORS.path(namespace, "llama-8b-l40s")),
            timeout_s=30,
            what="the ServiceMonitor",
        )
    endpoint = monitor["spec"]["endpoints"][0]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    assert monitor["metadata"]["ownerReferences"][0]["kind"] == "LLMService"
