"""Readiness probes against a local process, as the kubelet runs them: httpGet and tcpSocket.

An exec probe would run inside the container, which does not exist here, so it is treated as
passing while the process runs; the module says so rather than pretending to run it.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class ProbeSpec:
    kind: str  # "http", "tcp" or "none"
    port: int | None = None
    path: str = "/"
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


def resolve_port(port: Any, container: Mapping[str, Any]) -> int | None:
    """A probe port is a number or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    if isinstance(port, str):
        if port.isdigit():
            return int(port)
        for declared in container.get("ports") or []:
            if declared.get("name") == port:
                return int(declared["containerPort"])
    return None


def container_port(container: Mapping[str, Any]) -> int | None:
    """The port the local process must listen on: the first TCP containerPort, else the probe's."""
    for declared in container.get("ports") or []:
        if declared.get("protocol", "TCP") == "TCP":
            return int(declared["containerPort"])
    probe = container.get("readinessProbe") or {}
    action = probe.get("httpGet") or probe.get("tcpSocket") or {}
    return resolve_port(action.get("port"), container)


def readiness_spec(container: Mapping[str, Any]) -> ProbeSpec:
    probe = container.get("readinessProbe")
    if not probe:
        return ProbeSpec(kind="none")
    common = {
        "initial_delay_s": float(probe.get("initialDelaySeconds", 0)),
        "period_s": float(probe.get("periodSeconds", 10)),
        "timeout_s": float(probe.get("timeoutSeconds", 1)),
        "success_threshold": int(probe.get("successThreshold", 1)),
        "failure_threshold": int(probe.get("failureThreshold", 3)),
    }
    if "httpGet" in probe:
        action = probe["httpGet"]
        return ProbeSpec(
            kind="http",
            port=resolve_port(action.get("port"), container),
            path=action.get("path", "/"),
            scheme=action.get("scheme", "HTTP"),
            headers=tuple((h["name"], h["value"]) for h in action.get("httpHeaders") or []),
            **common,  # type: ignore[arg-type]
        )
    if "tcpSocket" in probe:
        action = probe["tcpSocket"]
        return ProbeSpec(
            kind="tcp",
            port=resolve_port(action.get("port"), container),
            **common,  # type: ignore[arg-type]
        )
    return ProbeSpec(kind="none", **common)  # type: ignore[arg-type]


def run_probe(spec: ProbeSpec, host: str) -> bool:
    """One probe attempt; the kubelet counts 200-399 as success for httpGet."""
    if spec.kind == "none":
        return True
    if spec.port is None:
        return False
    if spec.kind == "tcp":
        try:
            with socket.create_connection((host, spec.port), timeout=spec.timeout_s):
                return True
        except OSError:
            return False
    scheme = "https" if spec.scheme.upper() == "HTTPS" else "http"
    try:
        response = httpx.get(
            f"{scheme}://{host}:{spec.port}{spec.path}",
            headers=dict(spec.headers),
            timeout=spec.timeout_s,
            verify=False,  # the kubelet does not verify probe certificates either
            trust_env=False,  # never send a probe of a 127.x address through a proxy
        )
    except httpx.HTTPError:
        return False
    return 200 <= response.status_code < 400
