"""GPU profiles from a ConfigMap (`--gpu-profiles-configmap`) extend what `sku` may name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _operator_harness import client_for, create, get_llms, install_crd, operator_thread, sample

from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster

B200 = """\
name: B200
gpuProductLabels: [NVIDIA-B200]
architecture: Blackwell
memoryGib: 178
hbmBandwidthGbps: 8000
bf16DenseTflops: 2250
hourlyCostUsd: 10
hourlyCostSource: "a test figure"
datasheetSource: "a test figure"
measured: null
"""


def test_configmap_profile_is_known_to_the_operator(kubeconfig: Path, namespace: str) -> None:
    client = client_for(kubeconfig)
    install_crd(client)
    client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"metadata": {"name": "gpu-profiles"}, "data": {"b200.yaml": B200}},
    )
    with operator_thread(kubeconfig, namespace, profiles_configmap=f"{namespace}/gpu-profiles"):
        body = sample("llama-3.1-8b-l40s.yaml", namespace)
        body["spec"]["accelerator"]["sku"] = "B200"
        create(client, body)

        def judged() -> dict[str, Any] | None:
            status = get_llms(client, namespace, "llama-8b-l40s").get("status", {})
            return status if status.get("phase") == "Infeasible" else None

        status = eventually(judged, timeout_s=30, what="phase Infeasible")
    message = next(c["message"] for c in status["conditions"] if c["type"] == "Infeasible")
    # Known now (no "unknown GPU"), but no node carries it.
    assert "no node can host accelerator.sku B200" in message
    assert "['NVIDIA-B200']" in message
