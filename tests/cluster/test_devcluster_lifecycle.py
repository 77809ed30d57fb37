"""A dev cluster of its own (not the session's): `down` stops exactly the processes `up`
started, pod processes included, and removes the state directory."""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from tokenpilot.tooling.devcluster import cluster, paths, procs
from tokenpilot.tooling.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1, trust_env=False).status_code == 200
    except httpx.TransportError:
        return False  # not listening yet


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
    eventually(lambda: _answers(f"http://{ip}:8080/"), timeout_s=30, what="the pod's server")
    children = cluster.runner_children(state_dir)
    assert len(children) == 1

    cluster.down(state_dir)

    for ref in [*st.processes, *children]:
        assert not procs.is_alive(ref), f"{ref.name} (pid {ref.pid}) survived down"
    assert not _processes_mentioning(str(state_dir)), "a process still refers to the state dir"
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
