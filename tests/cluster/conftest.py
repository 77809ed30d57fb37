"""Cluster-tier tests run against the session's dev cluster (see the dev-cluster pytest plugin
loaded in tests/conftest.py); every test here carries the `cluster` marker."""

from __future__ import annotations

from pathlib import Path

import pytest
from _operator_harness import client_for, install_crd

from tokenpilot.adapters.kube import KubeClient

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture
def client(kubeconfig: Path) -> KubeClient:
    """A client of the session's cluster, with the LLMService CRD installed and served."""
    kube = client_for(kubeconfig)
    install_crd(kube)
    return kube
