"""The API server itself refuses bad LLMServices, naming the field; good ones get defaults."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _operator_harness import create, sample

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.api import units

pytestmark = pytest.mark.cluster


def _set(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    target = out["spec"]
    *parents, leaf = path.split(".")
    for key in parents:
        target = target.setdefault(key, {})
    if value is None:
        target.pop(leaf, None)
    else:
        target[leaf] = value
    return out


INVALID = [
    ("autoscaling.minReplicas", 9, "minReplicas must be <= maxReplicas"),
    ("batching.maxNumBatchedTokens", "lots", "maxNumBatchedTokens must be an integer"),
    ("batching.maxNumSeqs", 0, "maxNumSeqs must be an integer >= 1"),
    ("batching.maxNumSeqs", 4096, "maxNumBatchedTokens must be >= maxNumSeqs"),
    ("batching.profile", "fastest", "spec.batching.profile"),
    ("engine.tensorParallelSize", 3, "tensorParallelSize must be 1, 2, 4 or 8"),
    ("engine.gpuMemoryUtilization", 1.5, "spec.engine.gpuMemoryUtilization"),
    ("accelerator.gpusPerReplica", 16, "spec.accelerator.gpusPerReplica"),
    ("slo.itlP99", "50 millis", "spec.slo.itlP99"),
    ("model.source", "ftp://weights", "spec.model.source"),
    ("model.shape", {"preset": "llama-3.1-8b", "numLayers": 3}, "give either shape.preset"),
    ("model.shape", {"preset": "gpt-9"}, "spec.model.shape.preset"),
    ("autoscaling.metrics", {"type": "prometheus"}, "prometheusUrl is required"),
    ("replicas", -1, "spec.replicas"),
    ("model.name", None, "spec.model.name"),
    ("engine.resources", {"requests": {"cpu": "lots"}}, "spec.engine.resources.requests.cpu"),
]


@pytest.mark.parametrize(
    ("path", "value", "needle"), INVALID, ids=[f"{p}={v}" for p, v, _ in INVALID]
)
def test_api_server_rejects_with_the_field(
    client: KubeClient, namespace: str, path: str, value: Any, needle: str
) -> None:
    body = _set(sample("llama-3.1-8b-l40s.yaml", namespace), path, value)
    with pytest.raises(KubeError) as err:
        create(client, body)
    assert err.value.status == 422
    assert needle in err.value.message, err.value.message


# The API types' rules (tokenpilot.api.units), which `tokenpilot plan` and `simulate` share.
SAME_WORDS = [
    ("slo.itlP99", 50, units.ITL_P99),
    ("slo.itlP99", "5m", units.ITL_P99),
    ("slo.itlP99", "50us", units.ITL_P99),
    ("slo.itlP99", "50 ms", units.ITL_P99),
    ("slo.ttftP99", "11m", units.TTFT_P99),
    ("autoscaling.interval", "500ms", units.AUTOSCALING_INTERVAL),
    ("autoscaling.scaleDownStabilization", "2h", units.STABILIZATION_WINDOW),
    ("engine.gpuMemoryUtilization", 90, units.GPU_MEMORY_UTILIZATION),
    ("engine.gpuMemoryUtilization", 0.99, units.GPU_MEMORY_UTILIZATION),
    ("slo.attainment", 99, units.ATTAINMENT),
]


@pytest.mark.parametrize(
    ("path", "value", "rule"), SAME_WORDS, ids=[f"{p}={v}" for p, v, _ in SAME_WORDS]
)
def test_units_are_refused_in_the_api_types_words(
    client: KubeClient, namespace: str, path: str, value: Any, rule: Any
) -> None:
    body = _set(sample("llama-3.1-8b-l40s.yaml", namespace), path, value)
    with pytest.raises(KubeError) as err:
        create(client, body)
    words = rule.message(value)
    if isinstance(rule, units.FractionRule):
        # CEL cannot show a number in its message within its cost budget; the rest is equal.
        words = words.split(" ", 1)[1]
    assert err.value.status == 422
    assert f"spec.{path}" in err.value.message and words in err.value.message, err.value.message


@pytest.mark.parametrize(
    ("path", "value"),
    [("slo.itlP99", "1500us"), ("slo.ttftP99", "1m30s"),
     ("engine.gpuMemoryUtilization", 0.98), ("autoscaling.interval", "1s")],
)  # fmt: skip
def test_what_the_api_types_accept_the_api_server_accepts(
    client: KubeClient, namespace: str, path: str, value: Any
) -> None:
    create(client, _set(sample("llama-3.1-8b-l40s.yaml", namespace), path, value))


def test_chunked_prefill_off_needs_a_budget_of_a_whole_prompt(
    client: KubeClient, namespace: str
) -> None:
    body = sample("llama-3.1-8b-l40s.yaml", namespace)
    body["spec"]["batching"] = {"chunkedPrefill": False, "maxNumBatchedTokens": 2048}
    with pytest.raises(KubeError, match="maxModelLen"):
        create(client, body)


def test_defaults_filled_by_the_api_server(client: KubeClient, namespace: str) -> None:
    body = sample("llama-3.1-8b-l40s.yaml", namespace)
    body["spec"] = {"model": body["spec"]["model"]}
    stored = create(client, body)["spec"]
    assert stored["accelerator"]["sku"] == "auto"
    assert stored["batching"]["maxNumBatchedTokens"] == "auto"
    assert stored["autoscaling"]["metrics"]["type"] == "direct"
    assert stored["engine"]["tensorParallelSize"] == 1
    assert stored["replicas"] == 1


def test_kubectl_short_name_and_columns(
    client: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    create(client, sample("llama-3.1-8b-l40s.yaml", namespace))
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "llms", "-n", namespace],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    header = out.splitlines()[0].split()
    for column in ("MODEL", "SKU", "REPLICAS", "READY", "BUDGET", "ITL-P99", "AGE"):
        assert column in header
