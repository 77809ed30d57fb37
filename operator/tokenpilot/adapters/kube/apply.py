"""Server-side apply: the only way rendered objects reach the cluster, under the reconciler's
field manager (the calibration writer applies its profile ConfigMaps under its own).

Conflicts are forced: the operator is the declared owner of every field it renders, so a hand
edit of one of those fields is drift to be undone, not an opinion to be negotiated. Fields it
does not render (a label someone added) stay with whoever set them.
"""

from __future__ import annotations

from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import path_of

FIELD_MANAGER = "tokenpilot"


def apply(
    client: KubeClient, manifest: dict[str, Any], *, field_manager: str = FIELD_MANAGER
) -> dict[str, Any]:
    """Apply one object; the object as stored."""
    return client.request(
        "PATCH",
        path_of(manifest),
        body=manifest,
        query={"fieldManager": field_manager, "force": "true"},
        content_type="application/apply-patch+yaml",
    )


def read(client: KubeClient, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The live counterpart of a rendered object, or None."""
    return client.get(path_of(manifest))
