"""In-cluster calibration, as decisions: whether a service's GPU must be calibrated, the Job
that does it, and what the Job's state means for the `Calibrating` condition.

    key        (SKU, model, engine image): what one calibration measures; a measured profile
               records its key, so the same key is never calibrated twice
    decide     Off / already measured / no ready engine yet / running / start a Job
    render_job the Job: the operator image's `tokenpilot calibrate` against one engine pod (not
               the Service, which would spread the grid over every replica), owned by the
               LLMService so deleting the service deletes the Job and, through the Job, its pod
    judge_job  the Job's status as Running / Succeeded / Failed with the reason in words

The user asks for a new calibration of a measured key with the annotation
`serving.tokenpilot.dev/recalibrate`: each new value of it runs one calibration.
No I/O, no clock: the adapters read the Job and pods and pass what they saw.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tokenpilot.api.llmservice import API_VERSION, KIND, CalibrationMode, LLMService
from tokenpilot.core.calibration.progress import PROGRESS_PORT, PROGRESS_PORT_NAME

RECALIBRATE_ANNOTATION = "serving.tokenpilot.dev/recalibrate"
KEY_LABEL = "serving.tokenpilot.dev/calibration-key"
# Not the engine pods' label (serving.tokenpilot.dev/llmservice): a calibration pod is no engine.
SERVICE_LABEL = "serving.tokenpilot.dev/calibrates"
# Where the calibrate container writes its result for the operator to read from the pod's
# status (a kubelet copies it into state.terminated.message): no RBAC for the Job's pod.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# The pod's own IP, from the downward API: the progress server binds it (on a node whose pods
# share the host's network, as the dev cluster's do, a wildcard bind would collide).
POD_IP_ENV = "POD_IP"


@dataclass(frozen=True)
class CalibrationKey:
    """What one calibration measures: the GPU, the served model and the engine build."""

    sku: str
    model: str
    engine_image: str

    @property
    def digest(self) -> str:
        text = f"{self.sku}\n{self.model}\n{self.engine_image}"
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def words(self) -> str:
        return f"{self.sku}, model {self.model}, engine {self.engine_image}"


def key_of(service: LLMService, sku: str) -> CalibrationKey:
    return CalibrationKey(
        sku=sku, model=service.spec.model.name, engine_image=service.spec.engine.image
    )


class Action(StrEnum):
    nothing = "Nothing"  # Off, or measured already: tune on what there is
    wait = "Wait"  # no ready engine pod to measure yet
    watch = "Watch"  # a Job for this key runs: follow it
    start = "Start"  # create the Job


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


class JobPhase(StrEnum):
    none = "None"  # no Job for this key and request
    active = "Active"  # its Job runs, or has finished and is not judged yet
    judged = "Judged"  # its Job finished and status.calibration says how


def decide(
    service: LLMService,
    key: CalibrationKey,
    *,
    measured_keys: frozenset[str],
    job: JobPhase,
    ready_engine: bool,
    honoured_request: str | None,
) -> Decision:
    """What to do about calibration for `service` on `key`; `measured_keys` are the digests of
    the keys measured profiles record, `job` where the Job for this key and request is,
    `honoured_request` the recalibrate annotation's value the last calibration ran for."""
    if service.spec.batching.calibration is CalibrationMode.Off:
        return Decision(Action.nothing, "spec.batching.calibration is Off")
    again = f"set the {RECALIBRATE_ANNOTATION} annotation to a new value to measure it again"
    if job is JobPhase.active:
        return Decision(Action.watch, f"calibrating {key.words}")
    if job is JobPhase.judged:
        # One run per key and request: a failed run is not retried against the same engine.
        return Decision(Action.nothing, f"{key.words} was calibrated for this request; {again}")
    request = current_request(service)
    asked = request is not None and request != honoured_request
    if key.digest in measured_keys and not asked:
        return Decision(Action.nothing, f"{key.words} has a measured profile; {again}")
    if not ready_engine:
        return Decision(Action.wait, f"waiting for a ready engine pod to calibrate {key.words}")
    why = f"asked by {RECALIBRATE_ANNOTATION}={request}" if asked else "no measured profile"
    return Decision(Action.start, f"calibrating {key.words}: {why}")


def job_name(service_name: str, key: CalibrationKey, request: str | None) -> str:
    """One Job per key and recalibrate request, so a new request never meets an old Job."""
    stem = re.sub(r"[^a-z0-9-]", "-", service_name.lower())[:40].strip("-")
    tag = hashlib.sha256(f"{key.digest}\n{request or ''}".encode()).hexdigest()[:8]
    return f"{stem}-calibrate-{tag}"


def current_request(service: LLMService) -> str | None:
    return service.metadata.annotations.get(RECALIBRATE_ANNOTATION)


@dataclass(frozen=True)
class JobSettings:
    """What the Job needs beyond the service: the operator's image and the grid."""

    operator_image: str
    grid: str = "quick"
    extra_args: tuple[str, ...] = ()


def render_job(
    service: LLMService,
    key: CalibrationKey,
    *,
    endpoint: str,
    budget_tokens: int,
    settings: JobSettings,
) -> dict[str, Any]:
    """The calibration Job, owned by the LLMService (deleting the service deletes it)."""
    meta = service.metadata
    name = job_name(meta.name, key, current_request(service))
    labels = {SERVICE_LABEL: meta.name, KEY_LABEL: key.digest}
    args = [
        "calibrate",
        "--endpoint",
        endpoint,
        "--model",
        key.model,
        "--gpu-name",
        key.sku,
        "--grid",
        settings.grid,
        "--max-num-batched-tokens",
        str(budget_tokens),
        *(["--model-shape", preset] if (preset := service.spec.model.shape.preset) else []),
        "--out",
        f"/tmp/{key.digest}.yaml",
        "--result-file",
        TERMINATION_MESSAGE_PATH,
        "--progress-address",
        f"$({POD_IP_ENV}):{PROGRESS_PORT}",
        *settings.extra_args,
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": meta.namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": meta.name,
                    "uid": meta.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            # One try: a failed run is reported, not repeated against the same engine.
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "calibrate",
                            "image": settings.operator_image,
                            "args": args,
                            "env": [
                                {
                                    "name": POD_IP_ENV,
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                }
                            ],
                            "ports": [{"name": PROGRESS_PORT_NAME, "containerPort": PROGRESS_PORT}],
                            "terminationMessagePath": TERMINATION_MESSAGE_PATH,
                            "terminationMessagePolicy": "File",
                        }
                    ],
                },
            },
        },
    }


class JobState(StrEnum):
    running = "Running"
    succeeded = "Succeeded"
    failed = "Failed"


@dataclass(frozen=True)
class JobVerdict:
    state: JobState
    reason: str  # CamelCase, for the condition's reason
    message: str
    result: str | None = None  # the container's termination message on success


def judge_job(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> JobVerdict:
    """The Job's state from its status and its pod's container status."""
    status = job.get("status") or {}
    terminated = _terminated(pods)
    message = str((terminated or {}).get("message") or "").strip()
    if status.get("succeeded"):
        if not message:
            return JobVerdict(
                JobState.failed,
                "NoResult",
                "the calibration Job succeeded but its pod left no result in its termination "
                "message",
            )
        return JobVerdict(JobState.succeeded, "Measured", "calibration finished", message)
    if status.get("failed"):
        code = (terminated or {}).get("exitCode")
        words = _EXIT_WORDS.get(code, f"exited with status {code}") if code is not None else ""
        detail = f": {message.splitlines()[-1]}" if message else ""
        return JobVerdict(
            JobState.failed,
            "CalibrationFailed",
            f"the calibration Job failed ({words or 'no exit status'}){detail}; the budget "
            f"stays as tuned on the previous profile",
        )
    return JobVerdict(JobState.running, "Running", "calibration running")


_EXIT_WORDS = {
    1: "the engine failed the protocol",
    2: "bad input",
    3: "refused: the timings did not fit or could not be taken",
    130: "interrupted",
}


def _terminated(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated:
                return dict(terminated)
    return None


# A termination message holds at most 4096 bytes; a profile's YAML is larger (about 5 kB for the
# quick grid), its gzip in base64 about 2 kB.
RESULT_PREFIX = "tokenpilot-profile/gzip+base64:"
RESULT_MAX_BYTES = 4096


def encode_result(profile_yaml: str) -> str:
    """The profile as the calibrate container's termination message."""
    text = RESULT_PREFIX + base64.b64encode(gzip.compress(profile_yaml.encode())).decode()
    if len(text) > RESULT_MAX_BYTES:
        raise ValueError(
            f"the profile takes {len(text)} bytes encoded, over the {RESULT_MAX_BYTES} a "
            "termination message holds; use the quick grid"
        )
    return text


def decode_result(message: str) -> str:
    """The profile YAML from a termination message; ValueError names what is wrong."""
    text = message.strip()
    if not text.startswith(RESULT_PREFIX):
        raise ValueError(f"the calibration result does not start with {RESULT_PREFIX!r}")
    try:
        return gzip.decompress(base64.b64decode(text[len(RESULT_PREFIX) :])).decode()
    except (ValueError, OSError) as exc:
        raise ValueError(f"the calibration result does not decode: {exc}") from None
