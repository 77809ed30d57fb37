"""Listing LLMServices (and, the same way, engine pods) across the watched namespaces, for the
resync loop and the autoscaler's rounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES, Resource


def list_llmservices(client: KubeClient, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """Every LLMService in `namespaces` (all namespaces when empty)."""
    return list_in(client, LLMSERVICES, namespaces)


def list_in(
    client: KubeClient,
    resource: Resource,
    namespaces: Sequence[str],
    query: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every object of `resource` matching `query` in `namespaces` (all namespaces when empty),
    one listing per namespace."""
    items: list[dict[str, Any]] = []
    scopes: list[str | None] = [*namespaces] or [None]
    for namespace in scopes:
        listed = client.request("GET", resource.path(namespace), query=query)
        items.extend(listed.get("items", []))
    return items
