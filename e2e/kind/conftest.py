"""The kind tier's fixtures. e2e/run-kind.sh creates the cluster, installs the chart (two
operator replicas watching the samples' namespace and the tests' one), applies the samples and
sets:

  TOKENPILOT_KUBECONFIG         the cluster's kubeconfig
  TOKENPILOT_E2E_RELEASE        NAMESPACE/NAME of that Helm release
  TOKENPILOT_KIND_PROVIDER      docker or podman: what runs the node containers
  TOKENPILOT_KIND_CLUSTER       the cluster's name
  TOKENPILOT_KIND_SAMPLES       the namespace the samples were applied to
  TOKENPILOT_KIND_NAMESPACE     the namespace these tests create their services in
  TOKENPILOT_KIND_ENGINE_IMAGE  the engine-simulator image loaded on the workers
  TOKENPILOT_KIND_REPORT        a JSON file for the figures the tests measure (optional)

Nothing here reaches a pod directly: the host has no route to pod IPs on a kind cluster, so
HTTP to a pod goes through the API server's pod proxy, as `kubectl get --raw` sends it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kind_cluster import REQUIRED, Kind

from chart import run


@pytest.fixture(scope="session")
def kind() -> Kind:
    missing = [name for name in REQUIRED if not os.environ.get(name)]
    if missing:
        pytest.fail(
            f"e2e/kind runs on a kind cluster that e2e/run-kind.sh prepared; {', '.join(missing)} "
            "not set: run e2e/run-kind.sh",
            pytrace=False,
        )
    release_namespace, _, release = os.environ["TOKENPILOT_E2E_RELEASE"].partition("/")
    report = os.environ.get("TOKENPILOT_KIND_REPORT")
    return Kind(
        provider=os.environ["TOKENPILOT_KIND_PROVIDER"],
        cluster=os.environ["TOKENPILOT_KIND_CLUSTER"],
        kubeconfig=Path(os.environ["TOKENPILOT_KUBECONFIG"]),
        release_namespace=release_namespace,
        release=release,
        samples=os.environ["TOKENPILOT_KIND_SAMPLES"],
        namespace=os.environ["TOKENPILOT_KIND_NAMESPACE"],
        engine_image=os.environ["TOKENPILOT_KIND_ENGINE_IMAGE"],
        report=Path(report) if report else None,
    )


@pytest.fixture
def services(kind: Kind) -> Iterator[list[str]]:
    """Names of the LLMServices a test creates in the tests' namespace; deleted afterwards,
    with their engine pods gone before the next test starts."""
    names: list[str] = []
    yield names
    for name in names:
        run("kubectl", "delete", "llms", name, "-n", kind.namespace, "--wait=true",
            "--timeout=120s", kubeconfig=kind.kubeconfig)  # fmt: skip
    for name in names:
        run("kubectl", "wait", "--for=delete", "pods", "-n", kind.namespace, "-l",
            f"app.kubernetes.io/instance={name}", "--timeout=120s",
            kubeconfig=kind.kubeconfig)  # fmt: skip
