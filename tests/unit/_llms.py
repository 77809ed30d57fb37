"""Builders shared by the LLMService unit tests: real API objects with synthetic sizes."""

from __future__ import annotations

from typing import Any

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.sku import GPU_PRODUCT_LABEL, NodeFacts

# The GPU profiles that ship with TokenPilot (policies/gpus), as the operator loads them.
CATALOG = load_builtin_catalog()
by_name = CATALOG.get
by_product = CATALOG.by_product_label


def node(name: str, product: str | None, gpus: int, **labels: str) -> NodeFacts:
    all_labels = dict(labels)
    if product:
        all_labels[GPU_PRODUCT_LABEL] = product
    return NodeFacts(name=name, labels=all_labels, allocatable_gpus=gpus)


CLUSTER = (
    node("h100-a", "NVIDIA-H100-80GB-HBM3", 8),
    node("h100-b", "NVIDIA-H100-80GB-HBM3", 8),
    node("l40s-a", "NVIDIA-L40S", 4),
    node("cpu-a", None, 0),
)


def spec(**overrides: Any) -> dict[str, Any]:
    """A minimal valid spec (llama-3.1-8b), with nested overrides by dotted path."""
    base: dict[str, Any] = {
        "model": {
            "name": "llama-8b",
            "source": "hf://meta-llama/Llama-3.1-8B-Instruct",
            "shape": {"preset": "llama-3.1-8b"},
        }
    }
    for path, value in overrides.items():
        target = base
        *parents, leaf = path.split("__")
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = value
    return base


def service(name: str = "chat", **overrides: Any) -> LLMService:
    return LLMService.model_validate(
        {
            "apiVersion": "serving.tokenpilot.dev/v1alpha1",
            "kind": "LLMService",
            "metadata": {"name": name, "namespace": "ml", "uid": "uid-1", "generation": 3},
            "spec": spec(**overrides),
        }
    )
