"""The samples, as e2e/run-kind.sh applied them, served by engine-simulator containers on the
kind workers the scheduler chose for their GPUs: the H100 sample's pods on the worker that
advertises H100s, the L40S sample's on the L40S worker, each pod asking for one
nvidia.com/gpu, the only thing that tells the workers apart.
"""

from __future__ import annotations

from typing import Any

import pytest
from kind_cluster import Kind, condition, is_ready

from tokenpilot_lab.devcluster.pytest_plugin import eventually

SAMPLES = {"llama-8b": "NVIDIA-H100-80GB-HBM3", "llama-8b-l40s": "NVIDIA-L40S"}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_sample_runs_on_the_worker_with_its_gpus(kind: Kind, name: str) -> None:
    def ready() -> dict[str, Any] | None:
        body = kind.get("llms", name, kind.samples)
        return body if condition(body, "Ready").get("status") == "True" else None

    eventually(ready, timeout_s=300, interval_s=2, what=f"sample {name} Ready")
    pods = [
        p
        for p in kind.items("pods", kind.samples, f"app.kubernetes.io/instance={name}")
        if is_ready(p)
    ]
    assert pods
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1", container["resources"]
        assert container["image"] == kind.engine_image
        (status,) = pod["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://"), status
        node = kind.get("node", pod["spec"]["nodeName"]) or {}
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == SAMPLES[name]
