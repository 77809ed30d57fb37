"""Listing LLMServices, for the resync loop and the autoscaler's rounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES


def list_llmservices(client: KubeClient, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """Every LLMService in `namespaces` (all namespaces when empty)."""
    items: list[dict[str, Any]] = []
    scopes: list[str | None] = [*namespaces] or [None]
    for namespace in scopes:
        items.extend(client.request("GET", LLMSERVICES.path(namespace)).get("items", []))
    return items
