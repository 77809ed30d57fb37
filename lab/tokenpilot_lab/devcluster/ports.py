"""Loopback ports: pick free ones, or check that a requested one is free."""

from __future__ import annotations

import socket

from tokenpilot_lab.host.errors import PortInUse

HOST = "127.0.0.1"


ANY = "0.0.0.0"


def free_ports(count: int, host: str = HOST) -> tuple[int, ...]:
    """`count` distinct ports the kernel says are free right now; the caller binds them moments
    later. All are held until the last is chosen: a port closed and asked for again can come back.
    Pass `ANY` for a process that listens on every address (pods here are loopback addresses)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return tuple(int(sock.getsockname()[1]) for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()


def free_port(host: str = HOST) -> int:
    """One port the kernel says is free right now (see `free_ports`)."""
    return free_ports(1, host)[0]


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
