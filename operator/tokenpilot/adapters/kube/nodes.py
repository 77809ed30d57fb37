"""Nodes as the SKU choice sees them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import NODES
from tokenpilot.core.sku import GPU_RESOURCE, NodeFacts


def _count(quantity: Any) -> int:
    try:
        return int(str(quantity))
    except ValueError:
        return 0


def node_facts(
    name: str, labels: Mapping[str, str], spec: Mapping[str, Any], status: Mapping[str, Any]
) -> NodeFacts:
    allocatable = status.get("allocatable") or {}
    return NodeFacts(
        name=name,
        labels=dict(labels),
        allocatable_gpus=_count(allocatable.get(GPU_RESOURCE, 0)),
        unschedulable=bool(spec.get("unschedulable", False)),
    )


def list_nodes(client: KubeClient) -> list[NodeFacts]:
    items = client.request("GET", NODES.path()).get("items", [])
    return [
        node_facts(
            n["metadata"]["name"],
            n["metadata"].get("labels") or {},
            n.get("spec") or {},
            n.get("status") or {},
        )
        for n in items
    ]
