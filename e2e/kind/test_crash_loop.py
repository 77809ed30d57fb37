"""A rollout whose engines crash on a bad argument, on a real kubelet: the kubelet backs the
container off (CrashLoopBackOff) and, with the rendered `terminationMessagePolicy:
FallbackToLogsOnError`, puts the tail of its log in the termination message; the operator reads
both from the pod's status and reports the service Degraded, naming CrashLoopBackOff and the
engine's own words (core/pod_health.py). Restoring the argument makes it Ready again, while the
old engine kept serving throughout (maxUnavailable 0).
"""

from __future__ import annotations

import json
from typing import Any

from kind_cluster import Kind, condition, engine_service, is_ready

from tokenpilot_lab.devcluster.pytest_plugin import eventually

NAME = "crash"
BAD_ARGS = ["--block-size", "abc"]
ENGINE_SAYS = "invalid int value: 'abc'"


def llms(kind: Kind) -> dict[str, Any]:
    return kind.get("llms", NAME, kind.namespace) or {}


def ready_now(kind: Kind) -> dict[str, Any] | None:
    body = llms(kind)
    ready = condition(body, "Ready")
    fresh = ready.get("observedGeneration") == body.get("metadata", {}).get("generation")
    return body if fresh and ready.get("status") == "True" else None


def patch_args(kind: Kind, args: list[str]) -> None:
    patch = json.dumps({"spec": {"engine": {"extraArgs": args}}})
    kind.kubectl("patch", "llms", NAME, "-n", kind.namespace, "--type=merge", "-p", patch)


def test_a_crash_looping_rollout_is_reported_degraded_with_the_kubelets_reason(
    kind: Kind, services: list[str]
) -> None:
    services.append(NAME)
    kind.apply(engine_service(kind, NAME, autoscaling={"enabled": False}, replicas=1))
    eventually(lambda: ready_now(kind), timeout_s=240, interval_s=1, what=f"{NAME} Ready")

    patch_args(kind, BAD_ARGS)

    def degraded() -> dict[str, Any] | None:
        body = llms(kind)
        found = condition(body, "Degraded")
        said = found.get("message", "")
        named = found.get("reason") == "CrashLoopBackOff" and ENGINE_SAYS in said
        return body if named and found.get("status") == "True" else None

    body = eventually(degraded, timeout_s=180, interval_s=1, what="Degraded: CrashLoopBackOff")
    assert body["status"]["phase"] == "Degraded"
    assert condition(body, "Ready")["status"] != "True"
    # What the operator read is what the kubelet wrote: the new pod's container is backing off,
    # its last run ended with an error code and the engine's message.
    pods = kind.items("pods", kind.namespace, f"app.kubernetes.io/instance={NAME}")
    crashing = [
        s
        for p in pods
        for s in p["status"].get("containerStatuses") or []
        if s.get("restartCount", 0) > 0
    ]
    assert crashing, [p["status"] for p in pods]
    last = crashing[0]["lastState"]["terminated"]
    assert last["exitCode"] != 0 and ENGINE_SAYS in last.get("message", ""), last
    # The old engine still serves while the new one crash-loops.
    assert any(is_ready(p) for p in pods), [p["status"] for p in pods]

    patch_args(kind, [])
    eventually(lambda: ready_now(kind), timeout_s=240, interval_s=1, what=f"{NAME} Ready again")
