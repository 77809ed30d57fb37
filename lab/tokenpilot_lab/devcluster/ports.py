"""Loopback ports: pick free ones, or check that a requested one is free."""

from __future__ import annotations

import socket

from tokenpilot_lab.host.errors import PortInUse

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A port the kernel says is free right now; the caller binds it moments later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def is_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def require_free(port: int, what: str, host: str = HOST) -> int:
    if not is_free(port, host):
        raise PortInUse(
            f"{what} port {host}:{port} is already in use (see `ss -ltnp 'sport = :{port}'`). "
            "Stop whatever holds it, or leave the port unset so a free one is chosen."
        )
    return port


def pick(requested: int | None, what: str) -> int:
    return require_free(requested, what) if requested else free_port()
