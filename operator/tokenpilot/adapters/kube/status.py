"""Writing an LLMService's status: server-side apply of the fields one writer owns.

Three writers share .status: the reconciler (phase, replicas, tuning, and the Ready,
Progressing, Degraded and Infeasible conditions), the autoscaler (status.autoscaling and the
MetricsAvailable condition) and the calibration writer (status.calibration and the Calibrating
condition). Each applies under its own field manager. The CRD declares
`conditions` a list map keyed by `type`, so the API server merges the two writers' conditions
entry by entry: neither can overwrite the other's with a copy it read earlier, as a merge patch
of the whole list would. A field a writer applied before and leaves out now is removed (tuning
after a spec turns Infeasible), so each writer always applies everything it owns.
"""

from __future__ import annotations

from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES
from tokenpilot.api.llmservice import API_VERSION, KIND

RECONCILER = "tokenpilot-reconciler"
AUTOSCALER = "tokenpilot-autoscaler"
CALIBRATION = "tokenpilot-calibration"


def apply_status(
    client: KubeClient, namespace: str, name: str, status: dict[str, Any], *, field_manager: str
) -> dict[str, Any]:
    """Apply `status` as everything `field_manager` owns in .status; the object as stored."""
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "status": status,
    }
    return client.request(
        "PATCH",
        LLMSERVICES.path(namespace, name) + "/status",
        body=body,
        query={"fieldManager": field_manager, "force": "true"},
        content_type="application/apply-patch+yaml",
    )
