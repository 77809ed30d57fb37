"""The chaos tier: faults injected into a real control plane (the session's dev cluster) while
the operator runs as its own process. Every test here carries the `cluster` marker; each case
prints its measured convergence as `chaos: <case>: <seconds> s`, which docs/reliability.md
collects."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "cluster"))  # the operator harness

from _chaos import Operator  # noqa: E402
from _operator_harness import client_for, install_crd  # noqa: E402

from tokenpilot.adapters.kube import KubeClient  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture
def client(kubeconfig: Path) -> KubeClient:
    kube = client_for(kubeconfig)
    install_crd(kube)
    return kube


@pytest.fixture
def operator(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    """The operator as a process watching the test's namespace; restartable, and checked for
    tracebacks when the test ends."""
    op = Operator(kubeconfig, namespace, tmp_path)
    op.start()
    try:
        yield op
    finally:
        op.stop()
    op.assert_no_traceback()
