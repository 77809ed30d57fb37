"""Helpers for the chart's e2e tests: the pinned helm binary and kubectl, both pointed at the
test cluster's kubeconfig, each call bounded by a timeout."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

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


def lease_pod(holder: str) -> str:
    """The pod named in a Lease's holderIdentity (`<pod name>_<suffix drawn at start>`; pod
    names have no underscore)."""
    return holder.split("_", 1)[0]
