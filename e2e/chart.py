"""Helpers for the chart's e2e tests: the pinned helm binary and kubectl, both pointed at the
test cluster's kubeconfig, each call bounded by a timeout."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tokenpilot_lab.devcluster import build
from tokenpilot_lab.host.errors import BinariesMissing

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "tokenpilot"
VALUES = sorted((REPO / "e2e" / "values").glob("*.yaml"))
MONITORING_CRDS = REPO / "e2e" / "crds"


def binary(name: str) -> str:
    if name in ("helm", "kubectl"):
        # The pinned build when there is one; on kind (e2e/run-kind.sh) the one on PATH.
        with contextlib.suppress(BinariesMissing):
            return str(build.binary(name))
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: run `make tools`")
    return found


def run(
    tool: str, *args: str, kubeconfig: Path, stdin: str | None = None, timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(
        [binary(tool), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def must(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{' '.join(result.args)}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def install_monitoring_crds(kubeconfig: Path) -> None:
    """The project's stand-ins for prometheus-operator's CRDs, applied and established."""
    must(
        run("kubectl", "apply", "--server-side", "-f", str(MONITORING_CRDS), kubeconfig=kubeconfig)
    )
    must(
        run(
            "kubectl",
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "-f",
            str(MONITORING_CRDS),
            kubeconfig=kubeconfig,
        )
    )


def pod_get(pod: dict[str, Any], port: int, path: str, kubeconfig: Path) -> tuple[int, str]:
    """GET `path` on a pod's port: the status code and the body.

    On the dev cluster a pod IP is a loopback address of this machine, reached directly (the
    API server refuses to proxy to loopback addresses). On a cluster of real nodes (kind) the
    host has no route to pod IPs, so the request goes through the API server's pod proxy."""
    ip = pod["status"]["podIP"]
    if ipaddress.ip_address(ip).is_loopback:
        answer = httpx.get(f"http://{ip}:{port}{path}", timeout=5, trust_env=False)
        return answer.status_code, answer.text
    meta = pod["metadata"]
    url = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}:{port}/proxy{path}"
    result = run("kubectl", "get", "--raw", url, kubeconfig=kubeconfig, timeout_s=30)
    return (200 if result.returncode == 0 else 502), result.stdout or result.stderr


def lease_pod(holder: str) -> str:
    """The pod named in a Lease's holderIdentity (`<pod name>_<suffix drawn at start>`; pod
    names have no underscore)."""
    return holder.split("_", 1)[0]


def sample_manifest(path: Path) -> str:
    """A sample as this cluster can run it. On kind (e2e/run-kind.sh sets
    TOKENPILOT_KIND_ENGINE_IMAGE) nothing can pull the sample's GPU vLLM image, so the engine
    is the engine simulator loaded on the workers, which takes the same `vllm serve` flags; the
    dev cluster's pod runner maps the GPU image itself, so there the sample is as written."""
    engine_image = os.environ.get("TOKENPILOT_KIND_ENGINE_IMAGE")
    if not engine_image:
        return path.read_text()
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        doc["spec"]["engine"]["image"] = engine_image
    return yaml.safe_dump_all(docs, sort_keys=False)
