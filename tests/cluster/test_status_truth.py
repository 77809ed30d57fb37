"""The status tells the truth on the real API server: readiness as `kubectl rollout status`
judges it, and pod failures named with their cause and fix.

The engine pods are real processes run by the dev cluster's pod runner (a tiny kubelet), so a
crash loop, an OOM kill, a missing Secret and a failed image pull reach the API server as a
kubelet would write them; the operator reads them from there.
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _operator_harness import (
    create,
    get_deployment,
    get_llms,
    operator_thread,
    patch_spec,
    sample,
)
from kubernetes import client as k8s
from kubernetes import watch

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.events import COMPONENT
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.api.llmservice import GROUP, PLURAL, VERSION
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
L40S = "llama-3.1-8b-l40s.yaml"
NAME = "llama-8b-l40s"
# The acceptance bound for a crash loop to show in the status (the pod runner restarts a
# crashed process after 1 s, doubling).
CRASH_SHOWN_S = 60


@pytest.fixture
def operator(kubeconfig: Path, namespace: str, client: KubeClient) -> Iterator[None]:
    with operator_thread(kubeconfig, namespace, resync_s=2.0):
        yield


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def status_of(client: KubeClient, namespace: str, name: str = NAME) -> dict[str, Any]:
    return dict(get_llms(client, namespace, name).get("status") or {})


def ready_now(client: KubeClient, namespace: str, name: str = NAME) -> dict[str, Any] | None:
    body = get_llms(client, namespace, name)
    status = body.get("status") or {}
    generation = body["metadata"]["generation"]
    ready = condition(status, "Ready")
    fresh = ready.get("observedGeneration") == generation
    return status if fresh and ready.get("status") == "True" else None


def naming(client: KubeClient, namespace: str, *needles: str) -> dict[str, Any] | None:
    """The status once a reconciler condition's reason or message holds every needle."""
    body = get_llms(client, namespace, NAME)
    status = body.get("status") or {}
    for c in status.get("conditions") or []:
        if c["type"] == "MetricsAvailable":
            continue
        text = f"{c['reason']}: {c.get('message', '')}"
        if c["status"] == "True" and all(n in text for n in needles):
            return status
    return None


def pods(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items = client.request("GET", RESOURCES[("v1", "Pod")].path(namespace)).get("items", [])
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def operator_events(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items = client.request("GET", RESOURCES[("v1", "Event")].path(namespace)).get("items", [])
    return [e for e in items if e.get("reportingComponent") == COMPONENT]


def kubectl_get_llms(kubeconfig: Path, namespace: str) -> list[str]:
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "llms", "-n", namespace],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    return out.splitlines()


def restarts(client: KubeClient, namespace: str) -> int:
    return max(
        (
            s.get("restartCount", 0)
            for p in pods(client, namespace)
            for s in (p.get("status") or {}).get("containerStatuses") or []
        ),
        default=0,
    )


# --- 1. readiness from the rollout -----------------------------------------------------------


def test_a_crash_looping_rollout_is_not_ready_and_names_the_crash(
    client: KubeClient, kubeconfig: Path, namespace: str, operator: None
) -> None:
    create(client, sample(L40S, namespace))
    eventually(lambda: ready_now(client, namespace), timeout_s=90, what="Ready")

    patch_spec(client, namespace, NAME, {"engine": {"extraArgs": ["--block-size", "abc"]}})
    status = eventually(
        lambda: naming(client, namespace, "CrashLoopBackOff", "invalid int value: 'abc'"),
        timeout_s=CRASH_SHOWN_S,
        what="a condition naming CrashLoopBackOff and the container's last message",
    )
    generation = get_llms(client, namespace, NAME)["metadata"]["generation"]
    ready = condition(status, "Ready")
    assert ready["status"] != "True" and ready["observedGeneration"] == generation
    assert status["phase"] == "Degraded"
    assert condition(status, "Degraded")["reason"] == "CrashLoopBackOff"
    row = kubectl_get_llms(kubeconfig, namespace)[1].split()
    assert "Degraded" in row and "CrashLoopBackOff" in row

    # Several restarts later, still one Event for the one transition.
    eventually(lambda: restarts(client, namespace) >= 3, timeout_s=60, what="three restarts")
    degraded = [e for e in operator_events(client, namespace) if e["type"] == "Warning"]
    assert [e["reason"] for e in degraded] == ["PhaseDegraded"], degraded
    assert "CrashLoopBackOff" in degraded[0]["message"]

    patch_spec(client, namespace, NAME, {"engine": {"extraArgs": []}})
    eventually(lambda: ready_now(client, namespace), timeout_s=90, what="Ready once restored")


def test_ready_is_never_true_while_old_pods_remain(
    client: KubeClient, k8s_api: k8s.ApiClient, namespace: str, operator: None
) -> None:
    """Every status the operator writes for the new generation says Ready only once the
    Deployment has rolled out completely (no old pod left), as `kubectl rollout status`."""
    create(client, sample(L40S, namespace))
    eventually(lambda: ready_now(client, namespace), timeout_s=90, what="Ready")
    seen: list[dict[str, Any]] = []
    stop = threading.Event()
    api = k8s.CustomObjectsApi(k8s_api)

    def record() -> None:
        stream = watch.Watch()
        for event in stream.stream(
            api.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
            timeout_seconds=120,
        ):  # fmt: skip
            seen.append(event["object"])
            if stop.is_set():
                stream.stop()

    watcher = threading.Thread(target=record, daemon=True)
    watcher.start()
    patch_spec(client, namespace, NAME, {"engine": {"env": [{"name": "ROLL", "value": "1"}]}})
    generation = get_llms(client, namespace, NAME)["metadata"]["generation"]
    eventually(lambda: ready_now(client, namespace), timeout_s=90, what="Ready after the roll")
    stop.set()
    patch_spec(client, namespace, NAME, {"engine": {"env": []}})  # one more event ends the watch
    watcher.join(30)
    during = [o.get("status") or {} for o in seen if o["metadata"]["generation"] == generation]
    progressing = [s for s in during if condition(s, "Progressing").get("status") == "True"]
    assert progressing, "the roll was never reported as Progressing"
    assert any("updated" in condition(s, "Progressing").get("message", "") for s in progressing)
    for s in during:
        if condition(s, "Ready").get("status") == "True":
            assert s["replicas"] == s["readyReplicas"] == 1, s


def test_progress_deadline_covers_the_startup_probe(
    client: KubeClient, namespace: str, operator: None
) -> None:
    create(client, sample(L40S, namespace))
    deployment = eventually(
        lambda: get_deployment(client, namespace, NAME), timeout_s=30, what="the Deployment"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    startup = container["startupProbe"]
    startup_s = startup["periodSeconds"] * startup["failureThreshold"]
    assert deployment["spec"]["progressDeadlineSeconds"] > startup_s


# --- 2. pod failures by name -----------------------------------------------------------------


def test_a_new_service_that_crash_loops_is_degraded_not_starting(
    client: KubeClient, namespace: str, operator: None
) -> None:
    body = sample(L40S, namespace)
    body["spec"]["engine"]["extraArgs"] = ["--block-size", "abc"]
    create(client, body)
    status = eventually(
        lambda: naming(client, namespace, "CrashLoopBackOff", "1 of 1", "engine.extraArgs"),
        timeout_s=CRASH_SHOWN_S,
        what="CrashLoopBackOff named, with the count and the fix",
    )
    assert status["phase"] == "Degraded"


def test_pods_that_cannot_be_scheduled_name_the_schedulers_reason(
    client: KubeClient, namespace: str, operator: None
) -> None:
    body = sample(L40S, namespace)
    body["spec"]["replicas"] = 5  # the one L40S node has 4 GPUs
    create(client, body)
    # The Deployment controller creates the five pods in batches (1, 2, 2), so the count is
    # read once all five exist.
    status = eventually(
        lambda: naming(
            client, namespace, "Unschedulable", "Insufficient nvidia.com/gpu", "of 5 engine pods"
        ),
        timeout_s=60,
        what="Unschedulable and the scheduler's reason, over all five pods",
    )
    # At least one of the five (earlier tests' pods may still hold L40S GPUs for a moment).
    message = condition(status, "Ready")["message"]
    assert re.search(r"[1-5] of 5 engine pods Unschedulable", message), message


def test_an_image_that_cannot_be_pulled(client: KubeClient, namespace: str, operator: None):
    body = sample(L40S, namespace)
    body["spec"]["engine"]["image"] = "registry.invalid/vllm/vllm-openai:v0.32.0"
    create(client, body)
    eventually(
        lambda: naming(client, namespace, "ImagePullBackOff", "registry.invalid", "engine.image"),
        timeout_s=60,
        what="ImagePullBackOff, the image and the fix",
    )


def test_an_engine_over_its_memory_limit_is_oomkilled(
    client: KubeClient, namespace: str, operator: None
) -> None:
    body = sample(L40S, namespace)
    body["spec"]["engine"]["resources"] = {"limits": {"memory": "16Mi"}}
    create(client, body)
    eventually(
        lambda: naming(client, namespace, "OOMKilled", "16Mi", "engine.resources.limits.memory"),
        timeout_s=CRASH_SHOWN_S,
        what="OOMKilled, the limit and the fix",
    )


# --- 3. Secrets that exist -------------------------------------------------------------------


def _never_started(client: KubeClient, namespace: str) -> bool:
    for pod in pods(client, namespace):
        for s in (pod.get("status") or {}).get("containerStatuses") or []:
            if "running" in (s.get("state") or {}) or s.get("restartCount"):
                return False
    return True


def test_a_missing_secret_is_named_before_any_pod_starts(
    client: KubeClient, namespace: str, operator: None
) -> None:
    body = sample(L40S, namespace)
    body["spec"]["model"]["hubTokenSecret"] = {"name": "hf-token"}
    create(client, body)
    status = eventually(
        lambda: naming(client, namespace, "CreateContainerConfigError", "hf-token"),
        timeout_s=60,
        what="the missing Secret named",
    )
    assert "kubectl create secret generic hf-token" in condition(status, "Ready")["message"]
    assert _never_started(client, namespace)

    # Created as the message says, the pods start and the service becomes Ready.
    client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        body={"metadata": {"name": "hf-token"}, "stringData": {"token": "hf_dummy"}},
    )
    eventually(lambda: ready_now(client, namespace), timeout_s=90, what="Ready with the Secret")


def test_a_missing_key_of_an_existing_secret_is_named(
    client: KubeClient, namespace: str, operator: None
) -> None:
    client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/secrets",
        body={"metadata": {"name": "hf-token"}, "stringData": {"HF_TOKEN": "hf_dummy"}},
    )
    body = sample(L40S, namespace)
    body["spec"]["model"]["hubTokenSecret"] = {"name": "hf-token"}
    create(client, body)
    eventually(
        lambda: naming(client, namespace, "CreateContainerConfigError", "hf-token", "token"),
        timeout_s=60,
        what="the missing key named",
    )
    assert _never_started(client, namespace)


# --- 5. no MissingMetrics warning for a new service ------------------------------------------


def test_a_new_autoscaled_service_gets_no_missing_metrics_warning(
    client: KubeClient, namespace: str, operator: None
) -> None:
    body = sample(L40S, namespace)
    body["spec"]["autoscaling"] = {"enabled": True, "minReplicas": 1, "maxReplicas": 2,
                                   "interval": "1s"}  # fmt: skip

    create(client, body)

    def metrics_read() -> bool:
        return condition(status_of(client, namespace), "MetricsAvailable").get("status") == "True"

    eventually(metrics_read, timeout_s=90, what="MetricsAvailable True (two scrapes in)")
    warnings = [e["reason"] for e in operator_events(client, namespace) if e["type"] == "Warning"]
    assert "MissingMetrics" not in warnings, warnings
