"""Bad input to the dev cluster gets a clear error naming the fix, never a hang, and a failed
`up` leaves no process and no state directory behind."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster_checks import processes_mentioning
from tokenpilot_lab.devcluster import build, cluster, state
from tokenpilot_lab.devcluster.versions import COMPONENTS
from tokenpilot_lab.host import procs
from tokenpilot_lab.host.errors import (
    BinariesMissing,
    ComponentFailed,
    PortInUse,
    StateDirError,
    ToolchainMissing,
)


def _tokenpilot(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenpilot.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_build_without_go_says_how_to_get_it(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = _tokenpilot("dev-cluster", "build", env=env)
    assert result.returncode == 1
    assert "no Go toolchain on PATH" in result.stderr
    assert "make tools" in result.stderr


def test_find_go_without_go_raises(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainMissing, match=r"go\.dev/dl"):
        build.find_go()


def test_up_before_build_names_make_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    with pytest.raises(BinariesMissing, match="make tools"):
        cluster.up(cluster.UpOptions(state_dir=tmp_path / "state"))
    assert not (tmp_path / "state").exists()


def test_a_second_build_does_nothing() -> None:
    results = build.build()  # `make tools` has run: everything is cached
    assert [r.built for r in results] == [False] * len(COMPONENTS)


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(PortInUse, match=f"127.0.0.1:{port} is already in use"):
            cluster.up(cluster.UpOptions(state_dir=tmp_path / "state", apiserver_port=port))
    assert not (tmp_path / "state").exists()


def test_malformed_node_pool_file_fails_before_anything_starts(tmp_path: Path) -> None:
    pools = tmp_path / "pools.yaml"
    pools.write_text("pools:\n- name: h100\n  count: 2\n  gpu: {product: H100, count: many}\n")
    result = _tokenpilot(
        "dev-cluster", "up", "--state-dir", str(tmp_path / "state"), "--node-pools", str(pools)
    )
    assert result.returncode == 1
    assert "pools[0].gpu.count" in result.stderr
    assert str(pools) in result.stderr
    assert not (tmp_path / "state").exists()


def _fake_state(state_dir: Path, record: str) -> None:
    state_dir.mkdir(parents=True)
    (state_dir / state.MARKER).write_text("old\n")
    (state_dir / state.RECORD).write_text(record)


def test_stale_state_dir_is_refused_and_down_cleans_it(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    dead = {"name": "etcd", "pid": 999_999_999, "start_ticks": 1, "log": "x"}
    _fake_state(state_dir, json.dumps({"format": 1, "name": "old", "processes": [dead]}))
    with pytest.raises(StateDirError, match="stale state directory") as info:
        cluster.up(cluster.UpOptions(state_dir=state_dir))
    assert "dev-cluster down --state-dir" in str(info.value)
    assert state_dir.exists()  # untouched by the refused `up`
    cluster.down(state_dir)
    assert not state_dir.exists()


def test_corrupt_state_dir_is_refused_and_down_removes_it(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _fake_state(state_dir, "{not json")
    result = _tokenpilot("dev-cluster", "up", "--state-dir", str(state_dir))
    assert result.returncode == 1
    assert "corrupt state directory" in result.stderr
    assert _tokenpilot("dev-cluster", "down", "--state-dir", str(state_dir)).returncode == 0
    assert not state_dir.exists()


def test_foreign_directory_is_never_touched(tmp_path: Path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(StateDirError, match="not a dev-cluster state directory"):
        cluster.up(cluster.UpOptions(state_dir=foreign))
    with pytest.raises(StateDirError):
        cluster.down(foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_status_of_a_missing_cluster_says_how_to_start_one(tmp_path: Path) -> None:
    result = _tokenpilot("dev-cluster", "status", "--state-dir", str(tmp_path / "none"))
    assert result.returncode == 1
    assert "dev-cluster up" in result.stderr


def test_a_process_that_exits_at_start_shows_its_log_tail(tmp_path: Path) -> None:
    proc, ref = procs.start(
        "broken",
        ["sh", "-c", "echo 'flag provided but not defined: -x' >&2; exit 3"],
        tmp_path / "broken.log",
    )
    with pytest.raises(ComponentFailed) as info:
        procs.wait_ready(proc, ref, lambda: False, timeout_s=30)
    assert "exited with code 3" in str(info.value)
    assert "flag provided but not defined" in str(info.value)


def test_a_process_that_never_gets_ready_times_out(tmp_path: Path) -> None:
    proc, ref = procs.start("slow", ["sleep", "60"], tmp_path / "slow.log")
    try:
        with pytest.raises(ComponentFailed, match="did not become ready within 1 s"):
            procs.wait_ready(proc, ref, lambda: False, timeout_s=1)
    finally:
        assert procs.stop(ref)
    assert not procs.is_alive(ref)


@pytest.fixture
def cache_with_broken_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The real cached binaries, except a kube-scheduler that fails the way a bad flag does."""
    cache = tmp_path / "cache"
    for component in COMPONENTS:
        real = build.component_dir(component)
        fake = cache / "tokenpilot" / "bin" / component.key
        fake.mkdir(parents=True)
        shutil.copy(real / build.RECEIPT, fake / build.RECEIPT)
        for name in component.binaries:
            (fake / name).symlink_to(real / name)
    scheduler = next(c for c in COMPONENTS if "kube-scheduler" in c.binaries)
    broken = cache / "tokenpilot" / "bin" / scheduler.key / "kube-scheduler"
    broken.unlink()
    broken.write_text("#!/bin/sh\necho 'Error: unknown flag: --no-such-flag' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    yield cache


def test_failed_up_stops_what_it_started_and_shows_the_log(
    cache_with_broken_scheduler: Path, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    with pytest.raises(ComponentFailed) as info:
        cluster.up(cluster.UpOptions(state_dir=state_dir))
    message = str(info.value)
    assert "kube-scheduler exited with code 1" in message
    assert "unknown flag: --no-such-flag" in message
    # etcd and kube-apiserver had started: they must be gone, and so must the state dir.
    assert not processes_mentioning(str(state_dir))
    assert not state_dir.exists()


def test_concurrent_clusters_get_different_pod_ranges(tmp_path: Path) -> None:
    first_choice = cluster.default_pod_cidr(tmp_path / "b")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / state.RECORD).write_text(json.dumps({"podCIDR": first_choice}))
    second_choice = cluster.default_pod_cidr(tmp_path / "b")
    assert second_choice != first_choice
    assert second_choice.startswith("127.") and second_choice.endswith(".0.0/16")
