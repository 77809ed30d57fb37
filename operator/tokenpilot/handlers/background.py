"""The operator's own background loops (the resync, the autoscaler, calibration): each is a task
started on kopf's startup and stopped here on its cleanup."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel `task` and wait until it has ended (None: it never started). asyncio.wait, not
    awaiting the task under suppress(CancelledError): that would also swallow a cancel of the
    cleanup itself."""
    if task is None:
        return
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled() and task.exception() is not None:
        log.error("%s ended with an error", task.get_name(), exc_info=task.exception())
