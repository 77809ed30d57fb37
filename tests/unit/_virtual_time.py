"""An asyncio event loop on virtual time: the clock moves only when nothing is ready to run,
straight to the next timer. A test of time limits and sleeps then takes no wall time and races
nothing: every wait lasts exactly what it says, whatever the machine is doing."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._virtual_s = 0.0

    def time(self) -> float:
        return self._virtual_s

    def _run_once(self) -> None:
        # Nothing to run now: jump to the earliest timer (CPython's loop keeps them in a heap).
        scheduled = self._scheduled  # type: ignore[attr-defined]
        if not self._ready and scheduled:  # type: ignore[attr-defined]
            self._virtual_s = max(self._virtual_s, scheduled[0].when())
        super()._run_once()  # type: ignore[misc]


def run_virtual(coroutine: Coroutine[Any, Any, T]) -> T:
    """`coroutine` run to its end on a fresh loop in virtual time."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()
