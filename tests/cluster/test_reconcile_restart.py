"""The operator killed mid-reconcile and started again converges, with no duplicates; deleting
an LLMService takes its objects with it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from _operator_harness import client_for, create, get_llms, install_crd, operator_process, sample

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
NUM_SERVICES = 6


def names(client: KubeClient, namespace: str, key: tuple[str, str]) -> list[str]:
    items = client.request("GET", RESOURCES[key].path(namespace)).get("items", [])
    return sorted(
        i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp")
    )


def test_killed_mid_reconcile_then_restarted_converges(
    kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    client = client_for(kubeconfig)
    install_crd(client)
    first = operator_process(kubeconfig, namespace, tmp_path / "first.log")
    try:
        for index in range(NUM_SERVICES):
            # H100 (16 GPUs in the dev cluster): every replica finds a GPU.
            body = sample("llama-3.1-8b-h100.yaml", namespace, replicas=1)
            body["spec"]["autoscaling"]["enabled"] = False
            body["metadata"]["name"] = f"svc-{index}"
            create(client, body)
        # Kill it as soon as it has started on the batch, with no chance to clean up.
        eventually(
            lambda: names(client, namespace, ("apps/v1", "Deployment")),
            timeout_s=60,
            what="the first Deployment",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)

    second = operator_process(kubeconfig, namespace, tmp_path / "second.log")
    try:

        def converged() -> bool:
            phases = [
                get_llms(client, namespace, f"svc-{i}").get("status", {}).get("phase")
                for i in range(NUM_SERVICES)
            ]
            return phases == ["Ready"] * NUM_SERVICES

        eventually(converged, timeout_s=120, what="every service Ready after the restart")
        expected = [f"svc-{i}" for i in range(NUM_SERVICES)]
        for key in (
            ("apps/v1", "Deployment"),
            ("v1", "Service"),
            ("policy/v1", "PodDisruptionBudget"),
        ):
            assert names(client, namespace, key) == expected
        # One ReplicaSet per Deployment: nothing was rolled twice by the restart.
        assert len(names(client, namespace, ("apps/v1", "ReplicaSet"))) == NUM_SERVICES

        client.request("DELETE", LLMSERVICES.path(namespace, "svc-0"))
        eventually(
            lambda: (
                "svc-0" not in names(client, namespace, ("apps/v1", "Deployment"))
                and "svc-0" not in names(client, namespace, ("v1", "Service"))
            ),
            timeout_s=60,
            what="the garbage collector to remove svc-0's objects",
        )
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(20)
        except Exception:
            second.kill()
            raise
