"""Uninstall and CRD upgrade, as docs/install.md tells them.

`helm uninstall` removes the operator and leaves the CRD, every LLMService and the engine
Deployments they own, which keep serving (and holding their GPUs); deleting the LLMServices is
what removes the engines, through owner references. The CRD upgrade command of the docs works
on a CRD that Helm installed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from chart import CHART, REPO, must, run, sample_manifest
from tokenpilot.api.crd import CRD_NAME
from tokenpilot_lab.devcluster.ports import ANY, free_port
from tokenpilot_lab.devcluster.pytest_plugin import eventually

SAMPLE = REPO / "samples" / "llama-3.1-8b-l40s.yaml"
CHART_CRDS = "helm/tokenpilot/crds/"
CHART_CRD = REPO / CHART_CRDS / "serving.tokenpilot.dev_llmservices.yaml"


def documented_crd_upgrade() -> list[str]:
    """The CRD upgrade command as docs/install.md gives it, word by word."""
    text = (REPO / "docs" / "install.md").read_text()
    found = re.search(rf"kubectl apply [^`\n]*{re.escape(CHART_CRDS)}", text)
    assert found, f"docs/install.md gives no `kubectl apply ... {CHART_CRDS}`"
    return found.group(0).split()


def get(kind: str, name: str, namespace: str, kubeconfig: Path) -> dict[str, Any] | None:
    args = ["get", kind, name, "-o", "yaml"] + (["-n", namespace] if namespace else [])
    result = run("kubectl", *args, kubeconfig=kubeconfig)
    return yaml.safe_load(result.stdout) if result.returncode == 0 else None


def ready(name: str, namespace: str, kubeconfig: Path) -> bool:
    body = get("llms", name, namespace, kubeconfig) or {}
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture
def installed(kubeconfig: Path, namespace: str) -> Iterator[str]:
    release = f"tu-{namespace[-6:]}"
    must(
        run(
            "helm", "install", release, str(CHART), "--namespace", namespace,
            "--set", f"operator.watchNamespaces={{{namespace}}}",
            "--set", f"metrics.port={free_port(ANY)}", "--wait", "--timeout", "3m",
            kubeconfig=kubeconfig,
        )
    )  # fmt: skip
    try:
        yield release
    finally:
        run("kubectl", "delete", "llms", "--all", "-n", namespace, kubeconfig=kubeconfig)
        run("helm", "uninstall", release, "-n", namespace, "--wait", kubeconfig=kubeconfig)


def test_uninstall_leaves_the_services_serving_until_they_are_deleted(
    installed: str, kubeconfig: Path, namespace: str
) -> None:
    must(
        run(
            "kubectl", "create", "secret", "generic", "hf-token", "-n", namespace,
            "--from-literal=token=hf_not_a_real_token", kubeconfig=kubeconfig,
        )
    )  # fmt: skip
    must(
        run(
            "kubectl", "apply", "-n", namespace, "-f", "-",
            stdin=sample_manifest(SAMPLE), kubeconfig=kubeconfig,
        )
    )  # fmt: skip
    name = yaml.safe_load(SAMPLE.read_text())["metadata"]["name"]
    eventually(lambda: ready(name, namespace, kubeconfig), timeout_s=180, what=f"{name} Ready")

    must(run("helm", "uninstall", installed, "-n", namespace, "--wait", kubeconfig=kubeconfig))

    # What stays: the CRD, the service, and its Deployment with its engine still ready.
    assert get("crd", CRD_NAME, "", kubeconfig) is not None
    assert get("llms", name, namespace, kubeconfig) is not None
    deployment = get("deployment", name, namespace, kubeconfig)
    assert deployment is not None and deployment["status"].get("readyReplicas") == 1
    assert get("deployment", f"{installed}-tokenpilot", namespace, kubeconfig) is None

    # How to remove them: delete the services; the garbage collector takes what they own.
    must(run("kubectl", "delete", "llms", "--all", "-n", namespace, kubeconfig=kubeconfig))
    eventually(
        lambda: get("deployment", name, namespace, kubeconfig) is None,
        timeout_s=60,
        what="the garbage collector to delete the engine Deployment",
    )


@pytest.fixture
def crd_left_to_helm(kubeconfig: Path) -> None:
    """No CRD unless Helm made it, so the release installed next makes it, as on a cluster
    where TokenPilot was first installed with Helm (the tests before may have applied it)."""
    crd = get("crd", CRD_NAME, "", kubeconfig)
    managers = {m.get("manager") for m in (crd or {}).get("metadata", {}).get("managedFields", [])}
    if crd is not None and "helm" not in managers:
        must(run("kubectl", "delete", "crd", CRD_NAME, "--wait=true", kubeconfig=kubeconfig))


def test_the_documented_crd_upgrade_works_on_a_crd_helm_installed(
    crd_left_to_helm: None, installed: str, kubeconfig: Path, tmp_path: Path
) -> None:
    # A newer CRD differs from the installed one; here, in one description.
    newer = yaml.safe_load(CHART_CRD.read_text())
    schema = newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["description"] += " (upgraded)"
    path = tmp_path / "crds"
    path.mkdir()
    (path / CHART_CRD.name).write_text(yaml.safe_dump(newer))
    _kubectl, *args = documented_crd_upgrade()
    try:
        must(run("kubectl", *args[:-1], str(path), kubeconfig=kubeconfig))
        stored = get("crd", CRD_NAME, "", kubeconfig) or {}
        description = stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"]
        assert description.endswith("(upgraded)")
    finally:
        must(
            run(
                "kubectl", "apply", "--server-side", "--force-conflicts", "-f",
                str(CHART_CRD), kubeconfig=kubeconfig,
            )
        )  # fmt: skip
