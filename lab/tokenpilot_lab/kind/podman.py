"""The podman that kind runs under here: its own storage, run directory and network
configuration, so the kind tier and the images tier (`make images`, the dev cluster's
container pod mode) never see each other's containers, images or networks.

kind calls `podman` itself, without flags, so everything is said in two configuration files
that `CONTAINERS_STORAGE_CONF` and `CONTAINERS_CONF` name:

- storage: the graph root under the per-user cache (`~/.cache/tokenpilot/kind/podman`), the run
  root under `/run/tokenpilot-kind`;
- engine: runc where the host's cgroups are v1 or hybrid (crun refuses them), the libpod run
  directory and the events log beside the run root;
- containers: nofile and nproc at what this host allows (podman's defaults are higher and fail
  with `error setting rlimit type 6: operation not permitted`), no pids limit (a node runs
  every pod's processes);
- network: its own configuration directory, so the `kind` network lives apart from the
  default one.

`render_*` are pure; `KindPodman.write` puts the files in place, `env` names them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tokenpilot_lab.devcluster import paths
from tokenpilot_lab.podrunner.containers import default_limits, global_flags

RUN_ROOT = Path("/run/tokenpilot-kind")


def _quote(value: str | Path) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KindPodman:
    """Where kind's podman keeps everything, and the host settings it must respect."""

    root: Path  # graph root, volumes, network configuration
    run_root: Path  # storage run root, libpod's run directory, events
    limits: Mapping[str, int]
    runtime: str | None  # None: podman's default

    @classmethod
    def default(cls) -> KindPodman:
        flags = global_flags()
        runtime = flags[flags.index("--runtime") + 1] if "--runtime" in flags else None
        return cls(paths.cache_root() / "kind" / "podman", RUN_ROOT, default_limits(), runtime)

    @property
    def storage_conf(self) -> Path:
        return self.root / "storage.conf"

    @property
    def containers_conf(self) -> Path:
        return self.root / "containers.conf"

    @property
    def network_dir(self) -> Path:
        return self.root / "networks"

    def render_storage_conf(self) -> str:
        return "\n".join(
            [
                "# kind's podman storage (tokenpilot kind); apart from the default storage.",
                "[storage]",
                'driver = "overlay"',
                f"graphroot = {_quote(self.root / 'storage')}",
                f"runroot = {_quote(self.run_root / 'storage')}",
                "",
            ]
        )

    def render_containers_conf(self) -> str:
        nofile, nproc = self.limits["nofile"], self.limits["nproc"]
        engine = [
            "[engine]",
            f"tmp_dir = {_quote(self.run_root / 'libpod')}",
            'events_logger = "file"',
            f"events_logfile_path = {_quote(self.run_root / 'events.log')}",
        ]
        if self.runtime is not None:
            engine.append(f"runtime = {_quote(self.runtime)}")
        return "\n".join(
            [
                "# kind's podman (tokenpilot kind); apart from the default configuration.",
                "[containers]",
                f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]',
                "pids_limit = 0",
                "",
                *engine,
                "",
                "[network]",
                f"network_config_dir = {_quote(self.network_dir)}",
                "",
            ]
        )

    def env(self) -> dict[str, str]:
        """What a process needs in its environment to use this podman (kind included)."""
        return {
            "CONTAINERS_STORAGE_CONF": str(self.storage_conf),
            "CONTAINERS_CONF": str(self.containers_conf),
            "KIND_EXPERIMENTAL_PROVIDER": "podman",
        }

    def write(self) -> None:
        """Write both files (only when their text changed) and make the directories."""
        for directory in (self.root, self.network_dir, self.run_root):
            directory.mkdir(parents=True, exist_ok=True)
        for path, text in (
            (self.storage_conf, self.render_storage_conf()),
            (self.containers_conf, self.render_containers_conf()),
        ):
            if not path.is_file() or path.read_text() != text:
                staging = path.with_name(f".{path.name}.{os.getpid()}")
                staging.write_text(text)
                staging.replace(path)

    def environ(self) -> dict[str, str]:
        """The current environment with this podman's settings on top."""
        return {**os.environ, **self.env()}
