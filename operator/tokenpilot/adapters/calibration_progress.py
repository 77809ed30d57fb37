"""Both ends of a calibration's progress report: `tokenpilot calibrate` serves it on
`--progress-address`, and the operator reads it from the Job's pod (core/calibration/progress.py
says what it holds)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from tokenpilot.adapters.json_endpoint import serving_json
from tokenpilot.core.calibration.progress import (
    PROGRESS_PATH,
    PROGRESS_PORT_NAME,
    Progress,
    parse_progress,
)
from tokenpilot.core.errors import TokenPilotError


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets or bare, as a pod IP is); TokenPilotError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    unexpanded = "$(" in host
    if unexpanded or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TokenPilotError(
            f"--progress-address {text!r} is not HOST:PORT (e.g. 10.0.0.7:9464); an "
            "unexpanded $(POD_IP) means the pod has no POD_IP variable"
        )
    return host, int(port)


@contextlib.contextmanager
def serving_progress(address: str, report: Callable[[], Progress]) -> Iterator[None]:
    """Answer GET /progress with `report()` as JSON until the block ends."""
    host, port = parse_address(address)
    try:
        serving = serving_json(host, port, PROGRESS_PATH, lambda: report().as_json(), "progress")
        with serving:
            yield
    except OSError as error:
        raise TokenPilotError(f"--progress-address {address}: cannot listen: {error}") from None


def progress_url(pod: Mapping[str, Any]) -> str | None:
    """Where a calibration pod reports: its IP and declared progress port (None before it has
    an IP, or for a pod rendered without the port)."""
    ip = (pod.get("status") or {}).get("podIP")
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PROGRESS_PORT_NAME and ip:
                host = f"[{ip}]" if ":" in ip else ip
                return f"http://{host}:{port['containerPort']}{PROGRESS_PATH}"
    return None


def read_progress(url: str, timeout_s: float = 1.0) -> Progress | None:
    """The report at `url`; None when the pod does not answer it (not listening yet, or gone):
    progress is for the reader's comfort, and the Job's own state says how the run ends."""
    try:
        response = httpx.get(url, timeout=timeout_s)
        response.raise_for_status()
        return parse_progress(response.json())
    except (httpx.HTTPError, ValueError):
        return None
