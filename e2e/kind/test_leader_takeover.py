"""The operator's leader killed on its node: the chart's two replicas elect on a Lease, the
leader's container is sent SIGKILL inside the node's containerd (no SIGTERM, no release of the
Lease, as when a process or a node dies), and the standby takes the Lease once the record it saw
has stood unchanged for the lease duration. The new leader then reconciles: a change to a sample
service reaches its Deployment. The kubelet restarts the killed container at once, in the same
pod; its process is a new candidate (its identity is the pod's name and a suffix drawn at start)
and comes back as the standby. Under the bare pod name it found itself on the Lease and resumed
leading, so the standby never took over: this test, on a real kubelet, is how that was found.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from kind_cluster import Kind, is_ready

from chart import lease_pod
from tokenpilot.adapters.metrics import parse_metrics
from tokenpilot_lab.devcluster.pytest_plugin import eventually

METRICS_PORT = 9100
SAMPLE = "llama-8b-l40s"  # autoscaling off: its replicas are the spec's


def operator_pods(kind: Kind) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={kind.release},app.kubernetes.io/component=operator"
    pods = kind.items("pods", kind.release_namespace, selector)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def lease(kind: Kind) -> dict[str, Any]:
    return (kind.get("lease", kind.release, kind.release_namespace) or {}).get("spec") or {}


def leading(kind: Kind, pod: dict[str, Any]) -> float | None:
    page = parse_metrics(kind.pod_get(pod, METRICS_PORT, "/metrics"))
    return page.max("tokenpilot_leader")


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_the_standby_takes_over_when_the_leader_is_killed(kind: Kind) -> None:
    def two_ready_and_a_leader() -> dict[str, Any] | None:
        pods = [p for p in operator_pods(kind) if is_ready(p)]
        holder = lease_pod(lease(kind).get("holderIdentity") or "")
        found = [p for p in pods if p["metadata"]["name"] == holder]
        return found[0] if len(pods) == 2 and found else None

    leader = eventually(
        two_ready_and_a_leader, timeout_s=120, interval_s=1, what="two Ready replicas, one leading"
    )
    name = leader["metadata"]["name"]
    (standby,) = [p for p in operator_pods(kind) if p["metadata"]["name"] != name]
    assert leading(kind, leader) == 1 and leading(kind, standby) == 0
    (status,) = leader["status"]["containerStatuses"]
    container_id = status["containerID"].removeprefix("containerd://")
    restarts = status["restartCount"]

    killed_at = time.time()
    kind.node_exec(leader["spec"]["nodeName"], "ctr", "--namespace=k8s.io", "task", "kill",
                   "--signal", "SIGKILL", container_id)  # fmt: skip

    def taken_over() -> dict[str, Any] | None:
        spec = lease(kind)
        holder = lease_pod(spec.get("holderIdentity") or "")
        return spec if holder == standby["metadata"]["name"] else None

    spec = eventually(
        taken_over, timeout_s=90, interval_s=0.5, what="the standby to take the Lease"
    )
    kind.record(
        "leader killed to Lease taken (s)", round(seconds(spec["acquireTime"]) - killed_at, 1)
    )

    # The new leader works: a change to a sample reaches its Deployment.
    patch = json.dumps({"spec": {"replicas": 2}})
    kind.kubectl("patch", "llms", SAMPLE, "-n", kind.samples, "--type=merge", "-p", patch)
    try:
        eventually(
            lambda: (kind.get("deployment", SAMPLE, kind.samples) or {}).get("spec", {})
            .get("replicas") == 2,
            timeout_s=60,
            interval_s=0.5,
            what=f"the new leader to scale Deployment {SAMPLE} to 2",
        )  # fmt: skip
    finally:
        patch = json.dumps({"spec": {"replicas": 1}})
        kind.kubectl("patch", "llms", SAMPLE, "-n", kind.samples, "--type=merge", "-p", patch)

    # The kubelet restarted the killed container; it stands by.
    def restarted() -> dict[str, Any] | None:
        pod = kind.get("pod", name, kind.release_namespace) or {}
        (again,) = pod.get("status", {}).get("containerStatuses") or [{}]
        return pod if again.get("restartCount", 0) > restarts and is_ready(pod) else None

    back = eventually(restarted, timeout_s=120, interval_s=1, what="the killed replica back, Ready")
    new_leader = kind.get("pod", standby["metadata"]["name"], kind.release_namespace) or {}
    assert leading(kind, new_leader) == 1 and leading(kind, back) == 0
