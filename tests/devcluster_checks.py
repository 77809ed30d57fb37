"""Checks shared by the dev-cluster tests (tests/ is on sys.path through its conftest)."""

from __future__ import annotations

from pathlib import Path

import httpx


def processes_mentioning(text: str) -> list[int]:
    """PIDs of the processes whose command line contains `text` (e.g. a state directory)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # the process exited while we looked
    return found


def answers(url: str) -> bool:
    """True if `url` answers 200 now (False while nothing listens there)."""
    try:
        return httpx.get(url, timeout=1, trust_env=False).status_code == 200
    except httpx.TransportError:
        return False
