"""Stopping the operator's background loops (resync, autoscaler, calibration) on shutdown."""

from __future__ import annotations

import asyncio

import pytest

from tokenpilot.handlers import background


async def _forever() -> None:
    while True:
        await asyncio.sleep(3600)


async def test_a_running_loop_is_stopped_and_ended() -> None:
    task = asyncio.create_task(_forever(), name="resync")
    await asyncio.sleep(0)
    await background.stop(task)
    assert task.cancelled()


async def test_a_loop_never_started_is_fine() -> None:
    await background.stop(None)


async def test_a_shutdown_cancelled_while_it_waits_is_not_swallowed() -> None:
    async def stubborn() -> None:
        # A loop that takes its time to end once cancelled (closing clients, say).
        try:
            await _forever()
        finally:
            await asyncio.sleep(3600)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    cleanup = asyncio.create_task(background.stop(task))
    await asyncio.sleep(0.01)
    cleanup.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cleanup
    task.cancel()
    await asyncio.wait({task})
