"""Why a service's engine pods are not running, named as the kubelet and the scheduler name it.

From the pods' status (what the scheduler and the kubelet wrote; nothing else is read, so
the operator needs no access to Secrets, events or logs), each pod that cannot serve is given
one reason, the first of these that applies:

  Unschedulable               PodScheduled is False: the scheduler's own message
  CreateContainerConfigError  the container cannot be created from its spec: a Secret or a
                              key that does not exist (the kubelet's message names it)
  ImagePullBackOff            the image cannot be pulled (ErrImagePull counts the same, or the
                              reason would flip between the two at each retry)
  OOMKilled                   the container's last run ended at its memory limit
  CrashLoopBackOff            the container exited with an error and is not ready; its last
                              termination message (the tail of its log, with the renderer's
                              terminationMessagePolicy) says why
  CreateContainerError, RunContainerError   as the kubelet says

A container that crashed and is starting again (running, not ready, restarts > 0) still counts
as crash-looping, so the reason does not flip with every restart. `verdict` turns the failures
into one condition: the commonest reason, how many pods, the cause and the fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.llmservice import LLMService

# Most specific first: when pods fail in different ways, the first reason here is reported.
ORDER = (
    "CreateContainerConfigError",
    "ImagePullBackOff",
    "OOMKilled",
    "CrashLoopBackOff",
    "CreateContainerError",
    "RunContainerError",
    "Unschedulable",
)
_PULL = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
# Longest cause quoted from a pod, so a condition stays one readable sentence.
MAX_CAUSE_CHARS = 160


@dataclass(frozen=True)
class PodFailure:
    """One pod that cannot serve: the reason, the pod and the cause in the cluster's words."""

    reason: str
    pod: str
    cause: str
    image: str = ""
    memory_limit: str = ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _clip(lines[-1]) if lines else ""


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CAUSE_CHARS else text[: MAX_CAUSE_CHARS - 3] + "..."


def _first_sentence(text: str) -> str:
    # The scheduler appends a second sentence on preemption, which adds nothing to the fix.
    return _clip(text.split(". ")[0].rstrip("."))


def _container_failure(
    pod: str, spec: Mapping[str, Any], status: Mapping[str, Any]
) -> PodFailure | None:
    if status.get("ready"):
        return None
    image = str(spec.get("image") or status.get("image") or "")
    limit = str(((spec.get("resources") or {}).get("limits") or {}).get("memory") or "")
    waiting = (status.get("state") or {}).get("waiting") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    now_terminated = (status.get("state") or {}).get("terminated") or {}
    reason = str(waiting.get("reason") or "")
    message = str(waiting.get("message") or "")
    if reason == "CreateContainerConfigError":
        return PodFailure(reason, pod, _clip(message))
    if reason in _PULL:
        return PodFailure("ImagePullBackOff", pod, _clip(message or reason), image=image)
    ended = last or now_terminated
    if ended.get("reason") == "OOMKilled":
        return PodFailure("OOMKilled", pod, "", memory_limit=limit)
    crashed = ended and (ended.get("exitCode") or 0) != 0 and status.get("restartCount", 0) > 0
    if reason == "CrashLoopBackOff" or crashed:
        code = ended.get("exitCode")
        said = _last_line(str(ended.get("message") or ""))
        cause = f"exit code {code}" + (f": {said}" if said else "") if code is not None else said
        return PodFailure("CrashLoopBackOff", pod, cause or _clip(message))
    if reason in ("CreateContainerError", "RunContainerError"):
        return PodFailure(reason, pod, _clip(message))
    return None


def pod_failure(pod: Mapping[str, Any]) -> PodFailure | None:
    """Why this pod cannot serve, if a reason in ORDER applies."""
    name = str(pod.get("metadata", {}).get("name", ""))
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return PodFailure("Unschedulable", name, _first_sentence(condition.get("message", "")))
    specs = {c.get("name"): c for c in pod.get("spec", {}).get("containers") or []}
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    found = [
        failure
        for s in statuses
        if (failure := _container_failure(name, specs.get(s.get("name"), {}), s)) is not None
    ]
    return min(found, key=lambda f: ORDER.index(f.reason), default=None)


def pod_failures(pods: Sequence[Mapping[str, Any]]) -> list[PodFailure]:
    """The failures of the pods that are not being deleted, by pod name."""
    live = [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]
    found = [f for p in live if (f := pod_failure(p)) is not None]
    return sorted(found, key=lambda f: f.pod)


@dataclass(frozen=True)
class Verdict:
    """One condition's worth: a CamelCase reason and one sentence with the fix."""

    reason: str
    message: str


def verdict(service: LLMService, failures: Sequence[PodFailure], num_pods: int) -> Verdict:
    """The reason most pods share (ORDER breaks ties), its count, cause and fix."""
    counts = Counter(f.reason for f in failures)
    reason = min(counts, key=lambda r: (-counts[r], ORDER.index(r)))
    first = next(f for f in failures if f.reason == reason)
    others = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()) if r != reason)
    also = f" (also {others})" if others else ""
    share = f"{counts[reason]} of {max(num_pods, counts[reason])} engine pods"
    return Verdict(reason, f"{share} {_what(reason, first)}{also}; {_fix(service, first)}")


def _what(reason: str, failure: PodFailure) -> str:
    if reason == "Unschedulable":
        return f"Unschedulable: {failure.cause}"
    if reason == "ImagePullBackOff":
        # The kubelet's message usually names the image already: say it once.
        pulling = "" if failure.image in failure.cause else f" pulling {failure.image}"
        return f"in ImagePullBackOff{pulling}: {failure.cause}"
    if reason == "OOMKilled":
        return f"OOMKilled at their memory limit of {failure.memory_limit or 'the node'}"
    if reason == "CrashLoopBackOff":
        return f"in CrashLoopBackOff, {failure.cause}"
    return f"in {reason}: {failure.cause}"


def _fix(service: LLMService, failure: PodFailure) -> str:
    spec = service.spec
    if failure.reason == "Unschedulable":
        return (
            f"free or add nodes with {spec.gpus_per_replica} allocatable nvidia.com/gpu of this "
            "SKU, or lower replicas"
        )
    if failure.reason == "ImagePullBackOff":
        return "correct engine.image (registry, name, tag) or give the nodes pull credentials"
    if failure.reason == "OOMKilled":
        if failure.memory_limit:
            return "raise engine.resources.limits.memory or remove the limit"
        return "give the engine a node with more memory, or lower engine.maxModelLen"
    if failure.reason == "CrashLoopBackOff":
        return "fix what the message names in engine.extraArgs, engine.env or engine.image"
    if failure.reason == "CreateContainerConfigError":
        return _secret_fix(service, failure.cause)
    return "see kubectl describe pod for the kubelet's events"


def _secret_fix(service: LLMService, cause: str) -> str:
    ref = service.spec.model.hub_token_secret
    if ref is None:
        return "correct the spec field the message names"
    namespace = service.metadata.namespace
    if "couldn't find key" in cause:
        return (
            f"add the key {ref.key} to Secret {ref.name}, or set model.hubTokenSecret.key to "
            "the key it has"
        )
    return (
        f"create it: kubectl create secret generic {ref.name} -n {namespace} "
        f"--from-literal={ref.key}=<your Hugging Face token>, or remove model.hubTokenSecret"
    )
