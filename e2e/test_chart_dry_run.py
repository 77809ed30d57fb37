"""`helm template` output for every values combination in e2e/values/, applied to the cluster
with a strict server-side dry run: the API server (with the LLMService CRD and the stand-in
monitoring CRDs) must accept every object, with no unknown field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chart import CHART, VALUES, install_monitoring_crds, must, run


@pytest.fixture(scope="module")
def monitoring_crds(kubeconfig: Path) -> None:
    install_monitoring_crds(kubeconfig)


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.stem)
def test_rendered_chart_passes_a_strict_server_side_dry_run(
    values: Path, kubeconfig: Path, namespace: str, monitoring_crds: None
) -> None:
    version = must(run("kubectl", "version", "-o", "json", kubeconfig=kubeconfig))
    rendered = must(
        run(
            "helm",
            "template",
            "tokenpilot",
            str(CHART),
            "--namespace",
            namespace,
            "--include-crds",
            "-f",
            str(values),
            "--kube-version",
            _server_version(version),
            kubeconfig=kubeconfig,
        )
    )
    result = run(
        "kubectl",
        "apply",
        "--dry-run=server",
        "--server-side",
        "--validate=strict",
        "--field-manager=tokenpilot-e2e",
        # Another test (or a helm install) may already own the CRD's fields: this checks what the
        # API server accepts, not who owns what.
        "--force-conflicts",
        "-f",
        "-",
        stdin=rendered,
        kubeconfig=kubeconfig,
    )
    assert result.returncode == 0, result.stderr
    applied = result.stdout.splitlines()
    assert any(line.startswith("deployment.apps/") for line in applied), result.stdout


def _server_version(version_json: str) -> str:
    server = json.loads(version_json)["serverVersion"]
    return f"v{server['major']}.{server['minor'].rstrip('+')}.0"
