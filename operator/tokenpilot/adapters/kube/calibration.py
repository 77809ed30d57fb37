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

from tokenpilot.adapters.kube.apply import apply
from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.pods import engine_pods, engine_url, ready_pods
from tokenpilot.adapters.kube.resources import CONFIGMAPS, JOBS
from tokenpilot.adapters.kube.status import CALIBRATION
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.core.calibration.cluster import KEY_LABEL, CalibrationKey
from tokenpilot.core.profiles import parse_profile

MEASURED_LABEL = "serving.tokenpilot.dev/measured-profile"
SKU_LABEL = "serving.tokenpilot.dev/sku"
MODEL_LABEL = "serving.tokenpilot.dev/model"
ENGINE_LABEL = "serving.tokenpilot.dev/engine"
DATE_LABEL = "serving.tokenpilot.dev/measured-at"
PROFILE_KEY = "profile.yaml"


def create_job(client: KubeClient, manifest: dict[str, Any]) -> None:
    meta = manifest["metadata"]
    client.request("POST", JOBS.path(meta["namespace"]), body=manifest)


def read_job(client: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    return client.get(JOBS.path(namespace, name))


def job_pods(client: KubeClient, namespace: str, job: str) -> list[dict[str, Any]]:
    return engine_pods(client, namespace, f"job-name={job}")


def ready_engine_endpoint(
    client: KubeClient, namespace: str, selector: str, budget_tokens: int
) -> str | None:
    """The URL of one ready engine pod (matching `selector`) started with `budget_tokens`:
    calibration measures one engine alone, which the Service (spreading requests over replicas)
    would not, and at the budget it is told (a pod of an older rollout runs another)."""
    return next(
        (
            engine_url(pod)
            for pod in ready_pods(client, namespace, selector)
            if _budget_arg(pod) == budget_tokens
        ),
        None,
    )


def _budget_arg(pod: dict[str, Any]) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        args = [str(a) for a in container.get("args") or []]
        for i, arg in enumerate(args):
            if arg == "--max-num-batched-tokens" and i + 1 < len(args):
                return int(args[i + 1]) if args[i + 1].isdigit() else None
    return None


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
            CONFIGMAPS.path(self.namespace),
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
        apply(client, body, field_manager=CALIBRATION)
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
