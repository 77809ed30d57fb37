"""Debian's `prometheus` as a local process, for tests and benchmarks that need a real server:
started on a free loopback port with the given configuration, ready once `/-/ready` answers,
stopped (and killed if it lingers) when the block ends."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tokenpilot_lab.devcluster.ports import free_port


class PrometheusError(RuntimeError):
    """Prometheus is missing, exited, or never became ready; the message says which."""


@contextlib.contextmanager
def running_prometheus(
    config: dict[str, Any], workdir: Path, *, ready_timeout_s: float = 30.0
) -> Iterator[str]:
    """Run Prometheus with `config` (written to workdir/prometheus.yml, data and log beside it)
    and yield its base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise PrometheusError(
            "prometheus is not installed: run `make system-deps` (Debian's prometheus package)"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    log_path = workdir / "prometheus.log"
    address = f"127.0.0.1:{free_port()}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address={address}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    url = f"http://{address}"
    try:
        _wait_ready(process, url, log_path, ready_timeout_s)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_ready(
    process: subprocess.Popen[bytes], url: str, log_path: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PrometheusError(
                f"prometheus exited with {process.returncode}:\n{_tail(log_path)}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/-/ready", timeout=2, trust_env=False).status_code == 200:
                return
        time.sleep(0.2)
    raise PrometheusError(f"prometheus not ready after {timeout_s:.0f} s:\n{_tail(log_path)}")


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"
