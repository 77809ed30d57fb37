"""The calibration's Kubernetes objects: its Job, the Job's pod, the measured profiles, and the
calibration writer's part of an LLMService's status.

Measured profiles are ConfigMaps in the namespace of the profiles ConfigMap, one per calibration
key, labelled so that `kubectl get configmaps -l serving.tokenpilot.dev/measured-profile -L ...`
lists them with their provenance (docs/calibration.md, "In the cluster"). A measured profile
wins over the catalog's (built-in or ConfigMap) profile of its SKU.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES
from tokenpilot.api.llmservice import API_VERSION, KIND
from tokenpilot.core.calibration.cluster import KEY_LABEL, CalibrationKey
from tokenpilot.core.profiles import GPUProfile, parse_profile

CALIBRATION_WRITER = "tokenpilot-calibration"
MEASURED_LABEL = "serving.tokenpilot.dev/measured-profile"
SKU_LABEL = "serving.tokenpilot.dev/sku"
MODEL_LABEL = "serving.tokenpilot.dev/model"
ENGINE_LABEL = "serving.tokenpilot.dev/engine"
DATE_LABEL = "serving.tokenpilot.dev/measured-at"
PROFILE_KEY = "profile.yaml"


def jobs_path(namespace: str, name: str | None = None) -> str:
    out = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    return f"{out}/{name}" if name else out


def create_job(client: KubeClient, manifest: dict[str, Any]) -> None:
    meta = manifest["metadata"]
    client.request("POST", jobs_path(meta["namespace"]), body=manifest)


def read_job(client: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    return client.get(jobs_path(namespace, name))


def job_pods(client: KubeClient, namespace: str, job: str) -> list[dict[str, Any]]:
    listed = client.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": f"job-name={job}"}
    )
    return list(listed.get("items") or [])


def ready_engine_endpoint(
    client: KubeClient, namespace: str, service: str, budget_tokens: int
) -> str | None:
    """http://<pod IP>:8000 of one ready engine pod of `service` started with `budget_tokens`:
    calibration measures one engine alone, which the Service (spreading requests over replicas)
    would not, and at the budget it is told (a pod of an older rollout runs another)."""
    listed = client.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        query={"labelSelector": f"serving.tokenpilot.dev/llmservice={service}"},
    )
    for pod in listed.get("items") or []:
        status = pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if not ready or not status.get("podIP") or pod["metadata"].get("deletionTimestamp"):
            continue
        if _budget_arg(pod) == budget_tokens:
            return f"http://{status['podIP']}:8000"
    return None


def _budget_arg(pod: dict[str, Any]) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        args = [str(a) for a in container.get("args") or []]
        for i, arg in enumerate(args):
            if arg == "--max-num-batched-tokens" and i + 1 < len(args):
                return int(args[i + 1]) if args[i + 1].isdigit() else None
    return None


def apply_calibration_status(
    client: KubeClient,
    namespace: str,
    name: str,
    *,
    condition: dict[str, Any],
    calibration: dict[str, Any],
) -> None:
    """Server-side apply of what the calibration writer owns: the Calibrating condition and
    status.calibration, under its own field manager."""
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "status": {"conditions": [condition], "calibration": calibration},
    }
    client.request(
        "PATCH",
        LLMSERVICES.path(namespace, name) + "/status",
        body=body,
        query={"fieldManager": CALIBRATION_WRITER, "force": "true"},
        content_type="application/apply-patch+yaml",
    )


def _label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63]
    return value.strip("-_.") or "unknown"


def profile_object_name(profile: GPUProfile, key: CalibrationKey) -> str:
    stem = re.sub(r"[^a-z0-9-]", "-", profile.name.lower()).strip("-")
    return f"gpu-profile-{stem}-{key.digest[:8]}"


@dataclass
class MeasuredProfiles:
    """The measured profiles of the cluster, read at start and added to by each calibration."""

    namespace: str | None
    _by_sku: dict[str, tuple[str, GPUProfile]] = field(default_factory=dict)
    _keys: set[str] = field(default_factory=set)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @property
    def keys(self) -> frozenset[str]:
        with self._guard:
            return frozenset(self._keys)

    def load(self, client: KubeClient) -> None:
        if self.namespace is None:
            return
        listed = client.request(
            "GET",
            f"/api/v1/namespaces/{self.namespace}/configmaps",
            query={"labelSelector": MEASURED_LABEL},
        )
        for item in listed.get("items") or []:
            meta = item["metadata"]
            text = (item.get("data") or {}).get(PROFILE_KEY)
            if text is None:
                continue
            profile = parse_profile(text, f"ConfigMap {self.namespace}/{meta['name']}")
            self._remember(meta["name"], (meta.get("labels") or {}).get(KEY_LABEL, ""), profile)

    def _remember(self, object_name: str, digest: str, profile: GPUProfile) -> None:
        with self._guard:
            if digest:
                self._keys.add(digest)
            current = self._by_sku.get(profile.name)
            date = profile.calibration.date if profile.calibration else ""
            old = current[1].calibration.date if current and current[1].calibration else ""
            if current is None or old <= date:
                self._by_sku[profile.name] = (object_name, profile)

    def store(self, client: KubeClient, key: CalibrationKey, text: str, source: str) -> str:
        """Keep a measured profile (YAML `text`) as a ConfigMap; its name."""
        if self.namespace is None:
            raise ValueError(
                "measured profiles need a namespace: run the operator with "
                "--gpu-profiles-configmap NAMESPACE/NAME"
            )
        profile = parse_profile(text, source)
        name = profile_object_name(profile, key)
        record = profile.calibration
        labels = {
            MEASURED_LABEL: "true",
            KEY_LABEL: key.digest,
            SKU_LABEL: _label_value(profile.name),
            MODEL_LABEL: _label_value(key.model),
            ENGINE_LABEL: _label_value(record.engine if record else "unknown"),
            DATE_LABEL: _label_value(record.date if record else "unknown"),
        }
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": labels,
                "annotations": {"serving.tokenpilot.dev/calibrated": key.words},
            },
            "data": {PROFILE_KEY: text},
        }
        client.request(
            "PATCH",
            f"/api/v1/namespaces/{self.namespace}/configmaps/{name}",
            body=body,
            query={"fieldManager": CALIBRATION_WRITER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )
        self._remember(name, key.digest, profile)
        return name

    def get(self, sku: str) -> GPUProfile | None:
        with self._guard:
            found = self._by_sku.get(sku)
        return found[1] if found else None

    def object_of(self, sku: str) -> str | None:
        with self._guard:
            found = self._by_sku.get(sku)
        return found[0] if found else None

    def over(self, lookup: Callable[[str], GPUProfile]) -> Callable[[str], GPUProfile]:
        """`lookup` with each SKU's measured profile in place of the catalog's."""

        def measured_first(name: str) -> GPUProfile:
            profile = lookup(name)
            return self.get(profile.name) or profile

        return measured_first
