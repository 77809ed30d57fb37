"""Helpers for the LLMService cluster tests: install the CRD, run the operator in-process or as
a process, create services, and count the API server's writes."""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tokenpilot.adapters.kube import KubeClient, connect
from tokenpilot.adapters.kube.apiserver_metrics import WriteCounts
from tokenpilot.adapters.kube.apiserver_metrics import api_writes as server_writes
from tokenpilot.adapters.kube.apply import apply
from tokenpilot.adapters.kube.events import COMPONENT
from tokenpilot.adapters.kube.resources import DEPLOYMENTS, LLMSERVICES, RESOURCES
from tokenpilot.adapters.metrics import MetricsPage, parse_metrics
from tokenpilot.api.crd import crd
from tokenpilot.handlers.operator import OperatorConfig, operate
from tokenpilot_lab.devcluster.ports import ANY, free_ports
from tokenpilot_lab.devcluster.pytest_plugin import eventually

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"


def install_crd(client: KubeClient) -> None:
    apply(client, crd())

    def established() -> bool:
        path = RESOURCES[("apiextensions.k8s.io/v1", "CustomResourceDefinition")].path(
            name="llmservices.serving.tokenpilot.dev"
        )
        body = client.get(path) or {}
        conditions = (body.get("status") or {}).get("conditions") or []
        served = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        # The discovery document lags the condition a little; wait for a real list to work.
        return served and client.get(LLMSERVICES.path("default")) is not None

    eventually(established, timeout_s=30, what="the LLMService CRD to be established")


@contextmanager
def operator_thread(
    kubeconfig: Path,
    namespace: str,
    resync_s: float = 2.0,
    profiles_configmap: str | None = None,
    calibration_args: tuple[str, ...] = (),
    metrics_port: int | None = None,
) -> Iterator[None]:
    """The operator, in this process, watching one namespace; stopped on exit; its own
    /metrics on 127.0.0.1:`metrics_port` where one is given."""
    stop, ready = threading.Event(), threading.Event()
    config = OperatorConfig(
        kubeconfig=str(kubeconfig),
        namespaces=(namespace,),
        resync_interval_s=resync_s,
        gpu_profiles_configmap=profiles_configmap,
        calibration_args=calibration_args,
        metrics_port=metrics_port,
        metrics_address="127.0.0.1",
    )
    errors: list[BaseException] = []

    def target() -> None:
        try:
            operate(config, stop_flag=stop, ready_flag=ready)
        except BaseException as exc:  # surfaced to the test below
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=target, name="operator", daemon=True)
    thread.start()
    assert ready.wait(60), "the operator did not become ready within 60 s"
    assert not errors, f"the operator failed to start: {errors}"
    try:
        yield
    finally:
        stop.set()
        thread.join(60)
        assert not thread.is_alive(), "the operator did not stop within 60 s"


def operator_process(
    kubeconfig: Path, namespace: str, log: Path, *extra_args: str
) -> subprocess.Popen[bytes]:
    """`tokenpilot run` as a separate process (so a test can kill it)."""
    cmd = [
        sys.executable, "-m", "tokenpilot.cli", "run",
        "--kubeconfig", str(kubeconfig), "--namespace", namespace, "--resync-interval", "2",
        *extra_args,
    ]  # fmt: skip
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def elected_operator(
    kubeconfig: Path, namespace: str, log: Path, identity: str, *extra_args: str
) -> subprocess.Popen[bytes]:
    """A replica that acts only while it holds the namespace's `tokenpilot` Lease."""
    return operator_process(
        kubeconfig, namespace, log,
        "--leader-election-lease", f"{namespace}/tokenpilot",
        "--leader-election-identity", identity,
        *extra_args,
    )  # fmt: skip


def lease_holder(client: KubeClient, namespace: str) -> str:
    lease = client.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/tokenpilot")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not gone within 20 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def sample(name: str, namespace: str, **spec_overrides: Any) -> dict[str, Any]:
    """A sample manifest, renamed into the test's namespace, with spec keys replaced."""
    body = yaml.safe_load((SAMPLES / name).read_text())
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = namespace
    for key, value in spec_overrides.items():
        body["spec"][key] = value
    # Sample secrets do not exist in a test namespace.
    body["spec"]["model"].pop("hubTokenSecret", None)
    return body


def create(client: KubeClient, body: dict[str, Any]) -> dict[str, Any]:
    return client.request("POST", LLMSERVICES.path(body["metadata"]["namespace"]), body=body)


def get_llms(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    found = client.get(LLMSERVICES.path(namespace, name))
    assert found is not None, f"LLMService {namespace}/{name} is gone"
    return found


def patch_spec(client: KubeClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    client.request(
        "PATCH",
        LLMSERVICES.path(namespace, name),
        body={"spec": spec},
        content_type="application/merge-patch+json",
    )


def get_deployment(client: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    return client.get(DEPLOYMENTS.path(namespace, name))


def args_of(deployment: dict[str, Any]) -> list[str]:
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def client_for(kubeconfig: Path) -> KubeClient:
    return connect(str(kubeconfig))


# --- counting writes --------------------------------------------------------------------------


# The operator's write paths: server-side apply of what it renders, and patches of its
# LLMServices (status, kopf's annotations). Counting these verbs only keeps out what the
# controllers do meanwhile in earlier tests' namespaces (deleting, updating Deployment status);
# Events are counted by listing ours (see resource_versions).
def api_writes(client: KubeClient) -> WriteCounts:
    applied = server_writes(
        client, ("deployments", "services", "poddisruptionbudgets", "servicemonitors"), ("APPLY",)
    )
    patched = server_writes(client, ("llmservices",), ("APPLY", "PATCH", "POST", "PUT"))
    return {**applied, **patched}


def resource_versions(client: KubeClient, namespace: str) -> dict[str, str]:
    """kind/name -> resourceVersion of everything the operator owns or writes in a namespace."""
    out: dict[str, str] = {}
    for key in (
        ("serving.tokenpilot.dev/v1alpha1", "LLMService"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("policy/v1", "PodDisruptionBudget"),
        ("v1", "Event"),
    ):
        for item in client.request("GET", RESOURCES[key].path(namespace)).get("items", []):
            if key[1] == "Event" and item.get("reportingComponent") != COMPONENT:
                continue
            out[f"{key[1]}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
    return out


def events_of(client: KubeClient, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    """The Events about the object `name` with `reason`."""
    events = client.request(
        "GET",
        RESOURCES[("v1", "Event")].path(namespace),
        query={"fieldSelector": f"involvedObject.name={name}"},
    ).get("items", [])
    return [e for e in events if e["reason"] == reason]


def metrics_ports(count: int) -> tuple[int, ...]:
    """Distinct ports free on every address, for operators' /metrics (which listen on all)."""
    return free_ports(count, ANY)


def operator_page(port: int) -> MetricsPage | None:
    """The in-process operator's /metrics on `port`, or None while it does not answer."""
    try:
        return parse_metrics(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
    except httpx.HTTPError:
        return None


def ready_pod_ip(client: KubeClient, namespace: str) -> str | None:
    """The IP of a Ready pod in `namespace`, if there is one."""
    items = client.request("GET", RESOURCES[("v1", "Pod")].path(namespace)).get("items", [])
    for pod in items:
        conditions = pod.get("status", {}).get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return str(pod["status"]["podIP"])
    return None
