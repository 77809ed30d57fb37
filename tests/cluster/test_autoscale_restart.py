"""A restarted operator resumes each service's autoscaler memory from its own namespace.

The operator runs in-process, stops (as an upgrade stops it), and starts again; the service's
engine pod is an engine simulator under light, steady load. Before the restart the forecast
has remembered tens of seconds of load; the memory is written to the operator's namespace as
it stops, and the new process's forecast starts from it instead of from nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _operator_harness import (
    create,
    metrics_ports,
    operator_page,
    operator_thread,
    ready_pod_ip,
    sample,
)

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.autoscaler_memory import LABEL
from tokenpilot.adapters.kube.resources import CONFIGMAPS, LLMSERVICES
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
NAME = "llama-8b"


MODEL = sample("llama-3.1-8b-h100.yaml", "default")["spec"]["model"]["name"]


@pytest.fixture
def steady_load(client: KubeClient, namespace: str) -> Iterator[threading.Event]:
    """Once `go` is set: short completions, one after another, until the test ends."""
    go, stop = threading.Event(), threading.Event()

    def worker() -> None:
        go.wait()
        with httpx.Client(timeout=30, trust_env=False) as http:
            while not stop.is_set():
                ip = ready_pod_ip(client, namespace)
                if ip is None:
                    stop.wait(0.5)
                    continue
                try:
                    http.post(
                        f"http://{ip}:8000/v1/completions",
                        json={"model": MODEL, "prompt": "hi", "max_tokens": 8},
                    )
                except httpx.HTTPError:
                    stop.wait(0.2)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    yield go
    stop.set()
    go.set()
    thread.join(30)


def forecast_memory_s(port: int, namespace: str) -> float | None:
    """The seconds of load the operator's forecast rests on, from its own /metrics."""
    page = operator_page(port)
    if page is None:
        return None
    for found in page.series("tokenpilot_forecast_memory_seconds"):
        if found.labels == {"namespace": namespace, "llmservice": NAME}:
            return found.value
    return None


def test_a_restarted_operator_resumes_the_forecast_it_had(
    kubeconfig: Path, client: KubeClient, namespace: str, steady_load: threading.Event
) -> None:
    profiles = f"{namespace}/gpu-profiles"  # the operator's namespace: the test's own
    body = sample("llama-3.1-8b-h100.yaml", namespace)
    body["spec"]["replicas"] = 1
    body["spec"]["autoscaling"].update(
        {"minReplicas": 1, "maxReplicas": 2, "interval": "2s", "metrics": {"type": "direct"}}
    )
    first, second = metrics_ports(2)
    with operator_thread(kubeconfig, namespace, profiles_configmap=profiles, metrics_port=first):
        create(client, body)
        steady_load.set()

        def remembers_30_s() -> float | None:
            found = forecast_memory_s(first, namespace)
            return found if found is not None and found >= 30 else None

        before = eventually(
            remembers_30_s,
            timeout_s=180,
            what="a forecast that remembers 30 s of load",
        )
    # Stopped: the memory is in the operator's namespace, one key for the service.
    listed = client.request("GET", CONFIGMAPS.path(namespace), query={"labelSelector": LABEL})
    keys = {key: text for item in listed["items"] for key, text in item["data"].items()}
    assert list(keys) == [f"{namespace}.{NAME}"], keys
    memory = json.loads(keys[f"{namespace}.{NAME}"])
    assert len(memory["load"]) >= before / 2 - 2  # a point every 2 s

    with operator_thread(kubeconfig, namespace, profiles_configmap=profiles, metrics_port=second):
        # The new process's first evaluation sets the figure: from the memory, it rests on
        # at least the load the old one had; from nothing it would be one interval's.
        after = eventually(
            lambda: forecast_memory_s(second, namespace),
            timeout_s=60,
            interval_s=0.2,
            what="the new process's forecast",
        )
        # To the second: the memory keeps its points' times rounded.
        assert round(after) >= round(before), (before, after)
        client.request("DELETE", LLMSERVICES.path(namespace, NAME))
        eventually(
            lambda: client.get(LLMSERVICES.path(namespace, NAME)) is None,
            timeout_s=30,
            what="the LLMService to be deleted",
        )
