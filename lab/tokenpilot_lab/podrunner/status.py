"""Pure: from a pod and what the runner observed of its local processes, the status patch.

The patch carries the Ready and ContainersReady conditions and the full containerStatuses list
(the API replaces that list as a whole); once every container of a pod that is not restarted
has exited (restartPolicy Never, or OnFailure after a success), it also carries the pod's final
phase, Succeeded or Failed, as a kubelet reports it. Containers the runner does not run keep
the status kwok gave them. A condition keeps its lastTransitionTime unless its status flips, and
no patch is produced when nothing changed, so a steady pod costs no writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ContainerState:
    """What the runner knows about one container it runs as a local process."""

    running: bool
    ready: bool
    restart_count: int = 0
    started_at: str | None = None
    waiting_reason: str | None = None  # ContainerCreating, CrashLoopBackOff, ImagePullBackOff
    waiting_message: str | None = None
    last_exit_code: int | None = None
    last_finished_at: str | None = None
    # Exited for good: the pod's restartPolicy does not restart it.
    terminated: bool = False
    # `podman://<name>` for a container; None for a local process.
    container_id: str | None = None
    last_reason: str | None = None  # OOMKilled; otherwise Completed or Error by the exit code
    last_message: str | None = None  # the termination message (FallbackToLogsOnError)


def _container_status(name: str, image: str, obs: ContainerState) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "image": image,
        "ready": obs.ready and obs.running,  # a container with no process is never ready
        "started": obs.running,
        "restartCount": obs.restart_count,
    }
    if obs.container_id is not None:
        entry["containerID"] = obs.container_id
    if obs.terminated and obs.last_exit_code is not None:
        entry["state"] = {"terminated": _terminated(obs, obs.last_exit_code)}
        return entry
    if obs.running:
        entry["state"] = {"running": {"startedAt": obs.started_at}}
    else:
        waiting: dict[str, Any] = {"reason": obs.waiting_reason or "ContainerCreating"}
        if obs.waiting_message:
            waiting["message"] = obs.waiting_message
        entry["state"] = {"waiting": waiting}
    if obs.last_exit_code is not None:
        entry["lastState"] = {"terminated": _terminated(obs, obs.last_exit_code)}
    return entry


def _terminated(obs: ContainerState, exit_code: int) -> dict[str, Any]:
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": obs.last_reason or ("Completed" if exit_code == 0 else "Error"),
        "finishedAt": obs.last_finished_at,
    }
    if obs.last_message:
        terminated["message"] = obs.last_message
    return terminated


def _condition(
    current: Mapping[str, Any] | None, type_: str, unready: list[str], now: str
) -> dict[str, Any]:
    ok = not unready
    status = "True" if ok else "False"
    kept = (
        current.get("lastTransitionTime") if current and current.get("status") == status else None
    )
    condition: dict[str, Any] = {"type": type_, "status": status, "lastTransitionTime": kept or now}
    if ok:
        # Explicit nulls clear the reason left from when the pod was not ready.
        condition["reason"] = None
        condition["message"] = None
    else:
        condition["reason"] = "ContainersNotReady"
        condition["message"] = f"containers with unready status: [{' '.join(unready)}]"
    return condition


def status_patch(
    pod: Mapping[str, Any], observed: Mapping[str, ContainerState], now: str
) -> dict[str, Any] | None:
    """The pod status patch for `observed` containers, or None when the status already says so."""
    spec_containers = pod.get("spec", {}).get("containers", [])
    status = pod.get("status", {}) or {}
    existing = {c.get("name"): c for c in status.get("containerStatuses") or []}
    statuses: list[dict[str, Any]] = []
    for container in spec_containers:
        name = container["name"]
        if name in observed:
            statuses.append(_container_status(name, container.get("image", ""), observed[name]))
        elif name in existing:
            statuses.append(existing[name])
    unready = [c["name"] for c in spec_containers if not _is_ready(c["name"], statuses)]
    current_conditions = list(status.get("conditions") or [])
    by_type = {c.get("type"): c for c in current_conditions}
    wanted = {t: _condition(by_type.get(t), t, unready, now) for t in ("ContainersReady", "Ready")}
    unchanged = all(_is_subset(s, existing.get(s["name"])) for s in statuses) and all(
        _is_subset(_sans_time(c), by_type.get(t)) for t, c in wanted.items()
    )
    phase = final_phase(observed) if len(observed) == len(spec_containers) else None
    if unchanged and (phase is None or status.get("phase") == phase):
        return None
    # The whole list goes out, so the patch means the same under merge and strategic merge.
    conditions = [wanted.get(c.get("type"), c) for c in current_conditions]
    conditions += [c for t, c in wanted.items() if t not in by_type]
    patch: dict[str, Any] = {"conditions": conditions, "containerStatuses": statuses}
    if phase is not None:
        patch["phase"] = phase
    return {"status": patch}


def final_phase(observed: Mapping[str, ContainerState]) -> str | None:
    """Succeeded or Failed once every container has exited for good; else None."""
    if not observed or not all(o.terminated for o in observed.values()):
        return None
    return "Succeeded" if all(o.last_exit_code == 0 for o in observed.values()) else "Failed"


def _is_ready(name: str, statuses: list[dict[str, Any]]) -> bool:
    return any(s["name"] == name and s.get("ready") for s in statuses)


def _sans_time(condition: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in condition.items() if k != "lastTransitionTime"}


def _is_subset(wanted: Any, current: Any) -> bool:
    """True when every field of `wanted` has the same value in `current` (recursively)."""
    if isinstance(wanted, Mapping):
        return isinstance(current, Mapping) and all(
            _is_subset(v, current.get(k)) for k, v in wanted.items()
        )
    return bool(wanted == current)
