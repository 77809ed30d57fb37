"""The chart installed with helm on the cluster runs the operator, and that operator reconciles
a sample LLMService.

Nothing here starts the operator: `helm install` creates its Deployment, and on the dev cluster
the pod runner runs the operator pod's container as a local process with the container's args
and a kubeconfig for the pod's ServiceAccount, so the chart's least-privilege ClusterRole is all
the operator gets. The pod turns Ready only through the chart's readiness probe on the
operator's health endpoint. The sample's engine pods run as engine simulators the same way. On
kind (e2e/run-kind.sh) the same tests run against the real images, on real kubelets, and reach
pods through the API server's pod proxy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from chart import (
    CHART,
    REPO,
    install_monitoring_crds,
    lease_pod,
    must,
    pod_get,
    run,
    sample_manifest,
)
from tokenpilot.adapters.metrics import parse_metrics
from tokenpilot_lab.devcluster.ports import ANY, free_port
from tokenpilot_lab.devcluster.pytest_plugin import DevCluster, eventually

SAMPLE = REPO / "samples" / "llama-3.1-8b-h100.yaml"
LOG_TAIL_CHARS = 4000
T = TypeVar("T")


@pytest.fixture(scope="module")
def monitoring_crds(kubeconfig: Path) -> None:
    install_monitoring_crds(kubeconfig)


def create_token_secret(namespace: str, kubeconfig: Path) -> None:
    must(
        run(
            "kubectl", "create", "secret", "generic", "hf-token", "-n", namespace,
            "--from-literal=token=hf_not_a_real_token", kubeconfig=kubeconfig,
        )
    )  # fmt: skip


def get_json(kind: str, name: str, namespace: str, kubeconfig: Path) -> dict[str, Any] | None:
    result = run("kubectl", "get", kind, name, "-n", namespace, "-o", "yaml", kubeconfig=kubeconfig)
    return yaml.safe_load(result.stdout) if result.returncode == 0 else None


def operator_pods(release: str, namespace: str, kubeconfig: Path) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    listing = must(
        run(
            "kubectl",
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            selector,
            "-o",
            "yaml",
            kubeconfig=kubeconfig,
        )
    )
    return list(yaml.safe_load(listing)["items"])


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def log_tail(dev_cluster: DevCluster, pod: dict[str, Any], kubeconfig: Path) -> str:
    """The operator's output: the pod runner's log of the local process, else `kubectl logs`."""
    meta = pod["metadata"]
    if dev_cluster.state_dir is not None:
        path = dev_cluster.state_dir / "pods" / f"{meta['namespace']}_{meta['name']}_operator.log"
        if not path.is_file():
            return f"(the pod runner has not started the operator: no {path})"
        return f"{path}:\n{path.read_text(errors='replace')[-LOG_TAIL_CHARS:]}"
    result = run(
        "kubectl", "logs", meta["name"], "-n", meta["namespace"], "--tail=60", kubeconfig=kubeconfig
    )
    return result.stdout[-LOG_TAIL_CHARS:] or result.stderr


def wait_for(
    check: Callable[[], T | None], *, timeout_s: float, what: str, diagnose: Callable[[], str]
) -> T:
    """`eventually`, with what `diagnose` returns added to the failure."""
    try:
        return eventually(check, timeout_s=timeout_s, interval_s=0.5, what=what)
    except pytest.fail.Exception as exc:
        failure = str(exc)
    pytest.fail(f"{failure}\n{diagnose()}", pytrace=False)


RESTRICTED = (
    "pod-security.kubernetes.io/enforce=restricted",
    "pod-security.kubernetes.io/enforce-version=latest",
)


def leader_pod(release: str, namespace: str, kubeconfig: Path) -> dict[str, Any] | None:
    """The operator replica holding the release's Lease (the one that reconciles and scales)."""
    lease = get_json("lease", f"{release}-tokenpilot", namespace, kubeconfig) or {}
    holder = lease_pod((lease.get("spec") or {}).get("holderIdentity") or "")
    pods = operator_pods(release, namespace, kubeconfig)
    return next((p for p in pods if p["metadata"]["name"] == holder and is_ready(p)), None)


@pytest.fixture
def release(kubeconfig: Path, namespace: str, monitoring_crds: None) -> Iterator[str]:
    name = f"tp-{namespace[-6:]}"  # namespaces end in a random suffix; ClusterRoles are global
    # The chart's namespace enforces Pod Security `restricted`: the operator's pods and the
    # sample's engine pods must both be admitted under it.
    must(run("kubectl", "label", "namespace", namespace, *RESTRICTED, kubeconfig=kubeconfig))
    must(
        run(
            "helm",
            "install",
            name,
            str(CHART),
            "--namespace",
            namespace,
            "-f",
            str(REPO / "e2e" / "values" / "monitoring.yaml"),
            "--set",
            f"operator.watchNamespaces={{{namespace}}}",
            "--set",
            f"metrics.port={free_port(ANY)}",
            "--timeout",
            "2m",
            kubeconfig=kubeconfig,
        )
    )
    try:
        yield name
    finally:
        run(
            "kubectl",
            "delete",
            "llms",
            "--all",
            "-n",
            namespace,
            "--wait=true",
            "--timeout=60s",
            kubeconfig=kubeconfig,
        )
        run(
            "helm",
            "uninstall",
            name,
            "--namespace",
            namespace,
            "--wait",
            "--timeout",
            "2m",
            kubeconfig=kubeconfig,
        )
        # The pod runner stops the operator process once its pod is deleting; wait for the pod
        # to be gone so no operator outlives its release into the next test.
        eventually(
            lambda: not operator_pods(name, namespace, kubeconfig),
            timeout_s=60,
            what=f"the operator pod of release {name} to be deleted",
        )


@pytest.fixture
def operator_pod(
    release: str, kubeconfig: Path, namespace: str, dev_cluster: DevCluster
) -> dict[str, Any]:
    """The chart's operator pod once its readiness probe passes."""
    seen: list[dict[str, Any]] = []

    def ready_pod() -> dict[str, Any] | None:
        pods = operator_pods(release, namespace, kubeconfig)
        seen[:] = pods
        return next((p for p in pods if is_ready(p)), None)

    def diagnose() -> str:
        if not seen:
            return f"no pod of the operator Deployment in {namespace}"
        pod = seen[0]
        statuses = (pod.get("status") or {}).get("containerStatuses")
        return (
            f"pod {pod['metadata']['name']}: phase {pod.get('status', {}).get('phase')}, "
            f"container statuses {statuses}\n{log_tail(dev_cluster, pod, kubeconfig)}"
        )

    return wait_for(
        ready_pod,
        timeout_s=120,
        what="the operator pod to turn Ready through its readiness probe",
        diagnose=diagnose,
    )


def test_chart_installs_the_operator_and_its_monitoring(
    release: str, kubeconfig: Path, namespace: str
) -> None:
    fullname = f"{release}-tokenpilot"
    for kind, name in [
        ("deployment", fullname),
        ("serviceaccount", fullname),
        ("service", f"{fullname}-metrics"),
        ("configmap", f"{fullname}-gpu-profiles"),
        ("servicemonitor", fullname),
        ("prometheusrule", fullname),
        ("configmap", f"{fullname}-dashboard-fleet"),
        ("role", fullname),
    ]:
        assert get_json(kind, name, namespace, kubeconfig), f"{kind}/{name} missing"
    assert get_json("clusterrole", fullname, "", kubeconfig)


def test_the_installed_operator_reconciles_a_sample(
    operator_pod: dict[str, Any], kubeconfig: Path, namespace: str, dev_cluster: DevCluster
) -> None:
    (container,) = operator_pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert pod_get(operator_pod, ports["health"], "/healthz", kubeconfig)[0] == 200

    def diagnose() -> str:
        return log_tail(dev_cluster, operator_pod, kubeconfig)

    if dev_cluster.state_dir is not None:
        # The pod runner handed the process its pod's ServiceAccount, not the runner's admin.
        meta = operator_pod["metadata"]
        path = dev_cluster.state_dir / "pods" / f"{namespace}_{meta['name']}_operator.kubeconfig"
        (user,) = yaml.safe_load(path.read_text())["users"]
        account = operator_pod["spec"]["serviceAccountName"]
        assert user["name"] == f"system:serviceaccount:{namespace}:{account}"

    # As the README and the sample say: the gated model's token first (any value on a cluster
    # whose engines are simulators), then the sample.
    create_token_secret(namespace, kubeconfig)
    must(
        run(
            "kubectl", "apply", "-n", namespace, "-f", "-",
            stdin=sample_manifest(SAMPLE), kubeconfig=kubeconfig,
        )
    )  # fmt: skip
    name = yaml.safe_load(SAMPLE.read_text())["metadata"]["name"]
    wait_for(
        lambda: get_json("deployment", name, namespace, kubeconfig),
        timeout_s=60,
        what=f"the operator to create Deployment {name}",
        diagnose=diagnose,
    )

    def ready() -> bool:
        service = get_json("llms", name, namespace, kubeconfig) or {}
        conditions = service.get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def diagnose_service() -> str:
        service = get_json("llms", name, namespace, kubeconfig) or {}
        pods = run("kubectl", "get", "pods", "-n", namespace, "-o", "wide", kubeconfig=kubeconfig)
        return f"status: {service.get('status')}\n{pods.stdout}\n{diagnose()}"

    wait_for(ready, timeout_s=180, what=f"LLMService {name} to be Ready", diagnose=diagnose_service)
    engine_pods = yaml.safe_load(
        must(
            run(
                "kubectl",
                "get",
                "pods",
                "-n",
                namespace,
                "-l",
                f"app.kubernetes.io/instance={name}",
                "-o",
                "yaml",
                kubeconfig=kubeconfig,
            )
        )
    )["items"]
    assert engine_pods and all(is_ready(p) for p in engine_pods)
    wanted = {"namespace": namespace, "llmservice": name}
    # Only the leader runs the autoscaler and serves its decisions; a standby answers health.
    leader = wait_for(
        lambda: leader_pod(operator_pod["metadata"]["labels"]["app.kubernetes.io/instance"],
                           namespace, kubeconfig),
        timeout_s=60, what="the replica holding the Lease", diagnose=diagnose,
    )  # fmt: skip

    def decided() -> bool:
        page = parse_metrics(pod_get(leader, ports["metrics"], "/metrics", kubeconfig)[1])
        return any(s.labels == wanted for s in page.series("tokenpilot_desired_replicas"))

    wait_for(
        decided,
        timeout_s=60,
        what=f"the autoscaler's decision for {name} on the operator's /metrics",
        diagnose=diagnose,
    )


def test_an_upgrade_keeps_the_values_given_at_install(
    release: str, kubeconfig: Path, namespace: str
) -> None:
    must(
        run(
            "helm",
            "upgrade",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--reuse-values",
            "--set",
            "operator.verbose=true",
            "--timeout",
            "2m",
            kubeconfig=kubeconfig,
        )
    )
    values = yaml.safe_load(
        must(
            run(
                "helm",
                "get",
                "values",
                release,
                "-n",
                namespace,
                "-o",
                "yaml",
                kubeconfig=kubeconfig,
            )
        )
    )
    assert values["serviceMonitor"]["enabled"] is True  # from monitoring.yaml at install
    assert values["operator"] == {"watchNamespaces": [namespace], "verbose": True}
    deployment = get_json("deployment", f"{release}-tokenpilot", namespace, kubeconfig)
    assert deployment is not None
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert f"--namespace={namespace}" in container["args"] and "--verbose" in container["args"]
    assert get_json("servicemonitor", f"{release}-tokenpilot", namespace, kubeconfig)
