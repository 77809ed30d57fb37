"""The state directory of one dev cluster and its `state.json` record.

The directory holds everything a cluster owns: PKI, etcd data, logs, kubeconfigs and the list
of processes `up` started (PID plus start time). A marker file proves a directory is ours, so
`down` never deletes a directory it did not create. The record is rewritten after every process
start, so even a half-finished `up` can be cleaned by `down`.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenpilot_lab.host.errors import StateDirError
from tokenpilot_lab.host.procs import ProcessRef, is_alive

MARKER = ".tokenpilot-dev-cluster"
RECORD = "state.json"
FORMAT = 1


@dataclass
class ClusterState:
    name: str
    state_dir: Path
    apiserver_url: str = ""
    kubeconfig: str = ""
    pod_cidr: str = ""
    # How the pod runner runs pods: "processes", "containers" (podman), or "" (no pod runner).
    pod_mode: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[ProcessRef] = field(default_factory=list)
    # The process the cluster lives for (a test session, a demo run); once it is gone the
    # cluster is an orphan and `cluster.sweep_orphans` takes it down.
    owner: ProcessRef | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": self.name,
            "apiserverUrl": self.apiserver_url,
            "kubeconfig": self.kubeconfig,
            "podCIDR": self.pod_cidr,
            "podMode": self.pod_mode,
            "ports": self.ports,
            "processes": [p.to_json() for p in self.processes],
            "owner": self.owner.to_json() if self.owner else None,
        }

    def save(self) -> None:
        path = self.state_dir / RECORD
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        os.replace(tmp, path)

    def alive(self) -> list[ProcessRef]:
        return [p for p in self.processes if is_alive(p)]


def is_ours(state_dir: Path) -> bool:
    return (state_dir / MARKER).is_file()


def create(state_dir: Path, name: str) -> ClusterState:
    """A fresh state dir; refuses to reuse one that exists (running, stale, corrupt or foreign)."""
    if state_dir.exists():
        check_reusable(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / MARKER).write_text(name + "\n")
    state = ClusterState(name=name, state_dir=state_dir)
    state.save()
    return state


def check_reusable(state_dir: Path) -> None:
    if state_dir.is_dir() and not any(state_dir.iterdir()):
        return
    if not is_ours(state_dir):
        raise StateDirError(
            f"{state_dir} exists and is not a dev-cluster state directory (no {MARKER}); "
            "refusing to touch it. Pass another --state-dir or --name."
        )
    state = load(state_dir)
    alive = state.alive()
    if alive:
        pids = ", ".join(f"{p.name}={p.pid}" for p in alive)
        raise StateDirError(
            f"dev cluster {state.name!r} is already running from {state_dir} ({pids}). "
            f"Use it (`tokenpilot dev-cluster env --state-dir {state_dir}`), or stop it first "
            f"with `tokenpilot dev-cluster down --state-dir {state_dir}`."
        )
    raise StateDirError(
        f"stale state directory {state_dir}: a previous dev cluster {state.name!r} did not shut "
        "down cleanly (none of its processes is running). Remove it with "
        f"`tokenpilot dev-cluster down --state-dir {state_dir}` and run `up` again."
    )


def load(state_dir: Path) -> ClusterState:
    record = state_dir / RECORD
    if not state_dir.is_dir():
        raise StateDirError(
            f"no dev cluster at {state_dir}; start one with `tokenpilot dev-cluster up`."
        )
    if not is_ours(state_dir):
        raise StateDirError(f"{state_dir} is not a dev-cluster state directory (no {MARKER}).")
    try:
        data = json.loads(record.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"unknown format {data.get('format')!r}")
        return ClusterState(
            name=str(data["name"]),
            state_dir=state_dir,
            apiserver_url=str(data.get("apiserverUrl", "")),
            kubeconfig=str(data.get("kubeconfig", "")),
            pod_cidr=str(data.get("podCIDR", "")),
            pod_mode=str(data.get("podMode", "")),
            ports={str(k): int(v) for k, v in data.get("ports", {}).items()},
            processes=[ProcessRef.from_json(p) for p in data.get("processes", [])],
            owner=ProcessRef.from_json(data["owner"]) if data.get("owner") else None,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StateDirError(
            f"corrupt state directory {state_dir}: cannot read {RECORD} ({exc}). "
            f"`tokenpilot dev-cluster down --state-dir {state_dir}` removes it (any process it "
            "started that is still running has to be stopped by hand)."
        ) from exc


def remove(state_dir: Path) -> None:
    if not state_dir.exists():
        return  # already gone (a concurrent `down`)
    if not is_ours(state_dir):
        raise StateDirError(f"refusing to delete {state_dir}: it has no {MARKER} marker.")
    shutil.rmtree(state_dir)
