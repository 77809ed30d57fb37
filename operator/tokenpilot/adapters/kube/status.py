"""Writing an LLMService's status: a merge patch of the fields one writer owns, and nothing
when nothing changed (the caller decides that in the core)."""

from __future__ import annotations

from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES


def patch_status(
    client: KubeClient, namespace: str, name: str, status: dict[str, Any]
) -> dict[str, Any]:
    """Merge `status` into .status (absent keys are left alone; None deletes a key)."""
    return client.request(
        "PATCH",
        LLMSERVICES.path(namespace, name) + "/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )
