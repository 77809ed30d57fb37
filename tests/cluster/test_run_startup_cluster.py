"""`tokenpilot run` against a reachable API server: a bad option still ends the process with one
line and exit status 2 (it used to keep running, reconciling nothing), and so does a cluster
without the LLMService CRD."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _operator_harness import install_crd

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.api.crd import CRD_NAME
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
BOUND_S = 60


def run(kubeconfig: Path, namespace: str, *args: str) -> tuple[int, str]:
    argv = [sys.executable, "-m", "tokenpilot.cli", "run", "--kubeconfig", str(kubeconfig)]
    try:
        done = subprocess.run(
            [*argv, "--namespace", namespace, *args],
            capture_output=True,
            text=True,
            timeout=BOUND_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"tokenpilot run {' '.join(args)} kept running: {exc.stderr!r}")
    return done.returncode, done.stderr


def one_line(code: int, stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in stderr, (code, stderr)
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_metrics_port_in_use(client: KubeClient, kubeconfig: Path, namespace: str, busy_port):  # type: ignore[no-untyped-def]
    line = one_line(*run(kubeconfig, namespace, "--metrics-port", str(busy_port)))
    assert f"--metrics-port {busy_port}" in line and "in use" in line


def test_a_metrics_port_out_of_range(client: KubeClient, kubeconfig: Path, namespace: str):
    line = one_line(*run(kubeconfig, namespace, "--metrics-port", "99999"))
    assert "--metrics-port 99999" in line


def test_a_garbage_kubeconfig(tmp_path: Path, namespace: str) -> None:
    garbage = tmp_path / "kubeconfig"
    garbage.write_text("clusters: [this is: not a kubeconfig\n")
    line = one_line(*run(garbage, namespace))
    assert "--kubeconfig" in line and str(garbage) in line


def test_a_cluster_without_the_crd(client: KubeClient, kubeconfig: Path, namespace: str) -> None:
    crds = RESOURCES[("apiextensions.k8s.io/v1", "CustomResourceDefinition")]
    client.request("DELETE", crds.path(name=CRD_NAME))
    eventually(
        lambda: client.get(crds.path(name=CRD_NAME)) is None, timeout_s=60, what="CRD deleted"
    )
    try:
        line = one_line(*run(kubeconfig, namespace))
        assert "LLMService CRD" in line and "kubectl apply --server-side -f crds/" in line
    finally:
        install_crd(client)
