"""Ctrl-C reaches the probe however its timing falls.

On Python 3.11 `asyncio.wait_for` returns the awaited result when its task is cancelled in the
same loop iteration as that result arrives, and the cancel is lost: `tokenpilot calibrate`
interrupted just as its decode streams' first tokens came in went on with the grid (seen once
in CI). The probe's timeouts keep a cancel however close the two land.
"""

from __future__ import annotations

import asyncio

import pytest

from tokenpilot.adapters.interference import _bounded
from tokenpilot.core.interference import ProbeError


async def test_a_cancel_landing_with_the_result_is_not_lost() -> None:
    loop = asyncio.get_running_loop()
    result: asyncio.Future[str] = loop.create_future()
    task = asyncio.create_task(_bounded(result, 60, "waiting for the first tokens"))
    await asyncio.sleep(0)  # the task now waits on the future
    result.set_result("first tokens")
    task.cancel()  # Ctrl-C, in the same iteration
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_timeout_names_what_was_awaited() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(ProbeError, match="timed out after 0 s waiting for the first tokens"):
        await _bounded(never, 0.01, "waiting for the first tokens")
