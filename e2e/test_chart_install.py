"""The chart installed with helm on the cluster runs the operator, and that operator reconciles
a sample LLMService.

The operator's pod runs here as a local process standing in for it: the test reads the
container args from the Deployment the chart installed and starts `tokenpilot` with exactly those
args, authenticated as the chart's ServiceAccount (a token from the TokenRequest API). So the
least-privilege ClusterRole is what the operator really gets: a verb missing from it fails this
test. Two things differ from a pod, both about the network namespace a local process lacks: the
health and metrics ports are moved to free loopback ports, and the kubeconfig is passed as a flag
(in a pod the service account is mounted).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from chart import CHART, REPO, install_monitoring_crds, must, run
from tokenpilot.adapters.metrics import parse_metrics
from tokenpilot.tooling.devcluster.pytest_plugin import eventually

SAMPLE = REPO / "samples" / "llama-3.1-8b-h100.yaml"


@pytest.fixture(scope="module")
def monitoring_crds(kubeconfig: Path) -> None:
    install_monitoring_crds(kubeconfig)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(kind: str, name: str, namespace: str, kubeconfig: Path) -> dict[str, Any] | None:
    result = run("kubectl", "get", kind, name, "-n", namespace, "-o", "yaml", kubeconfig=kubeconfig)
    return yaml.safe_load(result.stdout) if result.returncode == 0 else None


def service_account_kubeconfig(admin: Path, namespace: str, account: str, out: Path) -> Path:
    token = must(
        run(
            "kubectl",
            "create",
            "token",
            account,
            "-n",
            namespace,
            "--duration=1h",
            kubeconfig=admin,
        )
    ).strip()
    config = yaml.safe_load(admin.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    out.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [
                    {"name": account, "context": {"cluster": cluster["name"], "user": account}}
                ],
                "current-context": account,
            }
        )
    )
    return out


@pytest.fixture
def release(kubeconfig: Path, namespace: str, monitoring_crds: None) -> Iterator[str]:
    name = f"tp-{namespace[-6:]}"  # namespaces end in a random suffix; ClusterRoles are global
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
            "--timeout",
            "2m",
            kubeconfig=kubeconfig,
        )


@pytest.fixture
def operator(
    release: str, kubeconfig: Path, namespace: str, tmp_path: Path
) -> Iterator[tuple[str, str]]:
    deployment = get_json("deployment", f"{release}-tokenpilot", namespace, kubeconfig)
    assert deployment is not None, "the chart installed no operator Deployment"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    health_port, metrics_port = free_port(), free_port()
    args = [
        re.sub(
            r"^--liveness=http://0\.0\.0\.0:\d+",
            f"--liveness=http://127.0.0.1:{health_port}",
            re.sub(r"^--metrics-port=\d+", f"--metrics-port={metrics_port}", arg),
        )
        for arg in container["args"]
    ]
    account_kubeconfig = service_account_kubeconfig(
        kubeconfig, namespace, pod["serviceAccountName"], tmp_path / "sa.kubeconfig"
    )
    log = tmp_path / "operator.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "tokenpilot.cli", *args, f"--kubeconfig={account_kubeconfig}"],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    health = f"http://127.0.0.1:{health_port}/healthz"
    metrics = f"http://127.0.0.1:{metrics_port}/metrics"

    def healthy() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the operator exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            return httpx.get(health, timeout=2, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        eventually(healthy, timeout_s=60, what="the operator's health endpoint")
        yield health, metrics
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


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
    operator: tuple[str, str], kubeconfig: Path, namespace: str
) -> None:
    _, metrics = operator
    must(run("kubectl", "apply", "-n", namespace, "-f", str(SAMPLE), kubeconfig=kubeconfig))
    name = yaml.safe_load(SAMPLE.read_text())["metadata"]["name"]
    eventually(
        lambda: get_json("deployment", name, namespace, kubeconfig),
        timeout_s=60,
        what=f"the operator to create Deployment {name}",
    )

    def ready() -> bool:
        service = get_json("llms", name, namespace, kubeconfig) or {}
        return bool(service.get("status", {}).get("readyReplicas"))

    eventually(ready, timeout_s=180, what=f"LLMService {name} to report ready replicas")
    wanted = {"namespace": namespace, "llmservice": name}

    def decided() -> bool:
        page = parse_metrics(httpx.get(metrics, timeout=5, trust_env=False).text)
        return any(s.labels == wanted for s in page.series("tokenpilot_desired_replicas"))

    eventually(
        decided,
        timeout_s=60,
        what=f"the autoscaler's decision for {name} on the operator's /metrics",
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
