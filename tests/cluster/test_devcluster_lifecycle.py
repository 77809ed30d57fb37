"""Dev clusters of their own (not the session's): `down` stops exactly the processes `up`
started, pod processes included, and removes the state directory; a deleted pod's process gets
its pod's grace period to exit, as under a kubelet, without holding up the other pods."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from devcluster_checks import answers, processes_mentioning
from tokenpilot_lab.devcluster import cluster, paths, state
from tokenpilot_lab.devcluster.pytest_plugin import eventually
from tokenpilot_lab.host import procs

pytestmark = pytest.mark.cluster


def test_down_leaves_no_process_behind(tmp_path: Path) -> None:
    state_dir = tmp_path / "cluster"
    st = cluster.up(cluster.UpOptions(name="lifecycle", state_dir=state_dir))
    pids = [p.pid for p in st.processes]
    assert [p.name for p in st.processes] == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "pod-runner",
    ]
    assert all(procs.is_alive(p) for p in st.processes)

    # A pod with a mapped image adds a grandchild process (under the pod runner).
    core = client.CoreV1Api(config.new_client_from_config(config_file=st.kubeconfig))
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "web"},
            "spec": {
                "containers": [
                    {
                        "name": "web",
                        "image": "tokenpilot.dev/http-server:1",
                        "ports": [{"containerPort": 8080}],
                    }
                ]
            },
        },
    )
    pod = eventually(
        lambda: (p := core.read_namespaced_pod("web", "default")).status.pod_ip and p,
        timeout_s=30,
        what="pod IP",
    )
    ip = pod.status.pod_ip
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(st.pod_cidr)
    eventually(lambda: answers(f"http://{ip}:8080/"), timeout_s=30, what="the pod's server")
    children = cluster.runner_children(state_dir)
    assert len(children) == 1

    cluster.down(state_dir)

    for ref in [*st.processes, *children]:
        assert not procs.is_alive(ref), f"{ref.name} (pid {ref.pid}) survived down"
    assert not processes_mentioning(str(state_dir)), "a process still refers to the state dir"
    assert not state_dir.exists()
    assert pids  # the PIDs we checked were real


def test_a_cluster_whose_owner_died_is_swept() -> None:
    """A test session or demo killed before its teardown leaves its cluster for the next to
    remove; a cluster whose owner lives is left alone."""
    prefix = f"sweeptest-{os.getpid()}-"  # only this test's clusters match
    owner = subprocess.Popen(["sleep", "600"])
    try:
        orphan = cluster.up(cluster.UpOptions(name=prefix + "a", owner_pid=owner.pid))
        lives = cluster.up(cluster.UpOptions(name=prefix + "b", owner_pid=os.getpid()))
        assert cluster.sweep_orphans(prefix) == []
        owner.kill()
        owner.wait(timeout=10)
        assert cluster.sweep_orphans(prefix) == [orphan.state_dir]
        assert not orphan.state_dir.exists()
        assert not any(procs.is_alive(p) for p in orphan.processes)
        assert all(procs.is_alive(p) for p in lives.processes)
    finally:
        owner.kill()
        for name in ("a", "b"):
            state_dir = paths.default_state_dir(prefix + name)
            if state_dir.exists():
                cluster.down(state_dir)


def test_a_crashing_local_process_is_restarted_and_shows_crash_loop(tmp_path: Path) -> None:
    images = tmp_path / "images.yaml"
    images.write_text(
        'images:\n  - image: "crash:*"\n    command: ["sh", "-c", "echo starting; exit 7"]\n'
    )
    state_dir = tmp_path / "cluster"
    st = cluster.up(cluster.UpOptions(name="crash", state_dir=state_dir, image_map=images))
    try:
        core = client.CoreV1Api(config.new_client_from_config(config_file=st.kubeconfig))
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "crashy"},
                "spec": {"containers": [{"name": "main", "image": "crash:1"}]},
            },
        )

        def restarted_twice() -> Any:
            pod = core.read_namespaced_pod("crashy", "default")
            statuses = pod.status.container_statuses or []
            return pod if statuses and statuses[0].restart_count >= 2 else None

        pod = eventually(restarted_twice, timeout_s=30, what="two restarts")
        status = pod.status.container_statuses[0]
        assert status.last_state.terminated.exit_code == 7
        assert not status.ready
        assert not any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)
    finally:
        cluster.down(state_dir)


# Two local programs for the grace-period tests. Both say "trapped" once their SIGTERM handling is
# in place; `drains` then needs a second to finish and writes $DONE_FILE on its clean exit,
# `stubborn` ignores SIGTERM altogether.
GRACE_IMAGE_MAP = {
    "images": [
        {
            "image": "drains:*",
            "command": [
                "sh",
                "-c",
                "trap 'sleep 1; echo clean > \"$DONE_FILE\"; exit 0' TERM; echo trapped; "
                "while :; do sleep 0.1; done",
            ],
        },
        {
            "image": "stubborn:*",
            "command": ["sh", "-c", "trap '' TERM; echo trapped; while :; do sleep 0.1; done"],
        },
    ]
}

Cluster = tuple[state.ClusterState, client.CoreV1Api]


def _grace_cluster(tmp_path: Path, name: str) -> Cluster:
    images = tmp_path / "images.yaml"
    images.write_text(yaml.safe_dump(GRACE_IMAGE_MAP))
    st = cluster.up(cluster.UpOptions(name=name, state_dir=tmp_path / "cluster", image_map=images))
    return st, client.CoreV1Api(config.new_client_from_config(config_file=st.kubeconfig))


@pytest.fixture(scope="module")
def grace_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    st, core = _grace_cluster(tmp_path_factory.mktemp("grace"), "grace")
    try:
        yield st, core
    finally:
        cluster.down(st.state_dir)


def _run_pod(
    grace: Cluster,
    name: str,
    image: str,
    *,
    grace_s: int | None = None,
    env: dict[str, str],
    finalizers: list[str] | None = None,
    host_network: bool = False,
) -> procs.ProcessRef:
    """Create a pod on the cluster and return its local process once SIGTERM is trapped."""
    st, core = grace
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": image,
                "env": [{"name": k, "value": v} for k, v in env.items()],
            }
        ]
    }
    if grace_s is not None:
        spec["terminationGracePeriodSeconds"] = grace_s
    if host_network:
        spec["hostNetwork"] = True
    metadata = {"name": name, "finalizers": finalizers or []}
    core.create_namespaced_pod("default", {"metadata": metadata, "spec": spec})
    ref = eventually(
        lambda: next(
            (r for r in cluster.runner_children(st.state_dir) if r.name == f"default/{name}/main"),
            None,
        ),
        timeout_s=30,
        what=f"the process of pod {name}",
    )
    eventually(
        lambda: "trapped" in Path(ref.log).read_text(),
        timeout_s=30,
        what=f"pod {name}'s process to trap SIGTERM",
    )
    return ref


def test_a_process_that_drains_on_sigterm_exits_on_its_own(
    grace_cluster: Cluster, tmp_path: Path
) -> None:
    done = tmp_path / "clean-exit"
    ref = _run_pod(grace_cluster, "drains", "drains:1", env={"DONE_FILE": str(done)})
    grace_cluster[1].delete_namespaced_pod("drains", "default")
    eventually(lambda: not procs.is_alive(ref), timeout_s=30, what="the process to exit")
    assert done.read_text().strip() == "clean", "the process did not finish its SIGTERM handler"


def test_a_process_ignoring_sigterm_is_killed_when_its_grace_period_ends(
    grace_cluster: Cluster,
) -> None:
    st, core = grace_cluster
    ref = _run_pod(grace_cluster, "stubborn", "stubborn:1", grace_s=2, env={})
    deleted_mono = time.monotonic()
    core.delete_namespaced_pod("stubborn", "default")
    eventually(lambda: not procs.is_alive(ref), timeout_s=30, what="the process to be killed")
    assert time.monotonic() - deleted_mono >= 2.0, "killed before its grace period ended"
    runner_log = (st.state_dir / "logs" / "pod-runner.log").read_text()
    assert f"(pid {ref.pid}) still running after its 2 s grace period: SIGKILL" in runner_log


def test_termination_starts_when_the_pod_is_marked_for_deletion(
    grace_cluster: Cluster, tmp_path: Path
) -> None:
    """As under a kubelet, the process stops at the deletionTimestamp, not when the pod object
    is finally removed (here a finalizer keeps it)."""
    core = grace_cluster[1]
    done = tmp_path / "clean-exit"
    hold = "tokenpilot.dev/test-hold"
    ref = _run_pod(
        grace_cluster, "held", "drains:1", env={"DONE_FILE": str(done)}, finalizers=[hold]
    )
    try:
        core.delete_namespaced_pod("held", "default")
        eventually(lambda: not procs.is_alive(ref), timeout_s=30, what="the process to exit")
        assert done.read_text().strip() == "clean"
        pod = core.read_namespaced_pod("held", "default")
        assert pod.metadata.deletion_timestamp is not None
    finally:
        core.patch_namespaced_pod("held", "default", {"metadata": {"finalizers": None}})


def test_a_long_grace_period_holds_up_no_other_pod_and_down_ends_it(tmp_path: Path) -> None:
    grace = _grace_cluster(tmp_path, "grace-down")
    st, core = grace
    try:
        draining = _run_pod(grace, "draining", "stubborn:1", grace_s=600, env={})
        core.delete_namespaced_pod("draining", "default")
        sigterm = (
            f"stopping default/draining main (pid {draining.pid}): 0 s preStop sleep, then "
            "SIGTERM; 600 s grace period"
        )
        eventually(
            lambda: sigterm in (st.state_dir / "logs" / "pod-runner.log").read_text(),
            timeout_s=30,
            what="the runner to send SIGTERM",
        )
        # The runner keeps serving pods while one process uses its grace period. On the host
        # network: kwok hands a deleted pod's IP to the next pod at once, and the runner then
        # cuts the old process short to free the address, which is not what this is about.
        later = _run_pod(grace, "later", "stubborn:1", env={}, host_network=True)
        assert procs.is_alive(draining)
    finally:
        cluster.down(st.state_dir)
    assert not procs.is_alive(draining), "a process in its grace period survived down"
    assert not procs.is_alive(later)
    assert not st.state_dir.exists()
