"""The autoscaler's kopf entry points: its loop (tokenpilot.runtime.evaluator) starts with the
operator and stops with it, writing each service's memory for the next process on the way out.

The process-wide part (the metrics sources) is built at startup from `memo.autoscaler_config`
(an AutoscalerConfig; defaults when absent); the operator's metrics are `memo.operator_metrics`,
served by the process since before it led. Time comes from the runtime's clock
(adapters/clock.py): monotonic seconds for windows, wall time for status.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.handlers import background
from tokenpilot.runtime.evaluator import Evaluator, run_forever
from tokenpilot.runtime.service_loop import AutoscalerConfig, AutoscalerRuntime

log = logging.getLogger("tokenpilot.autoscaler")


@kopf.on.startup()
async def _start_autoscaler(memo: Any, **_: Any) -> None:
    if getattr(memo, "autoscaler_sharded", False):
        return  # every replica runs its shards' autoscaler itself (handlers/shards.py)
    config = getattr(memo, "autoscaler_config", None) or AutoscalerConfig()
    shared = memo.runtime
    # The process's registry, served since start-up (handlers.operator.operate).
    metrics = getattr(memo, "operator_metrics", None) or OperatorMetrics()
    runtime = AutoscalerRuntime(config, metrics=metrics, clock=shared.clock)
    memo.autoscaler = runtime
    evaluator = Evaluator(runtime, shared.client, tuple(shared.namespaces), shared.by_name)
    evaluator.watch(shared.services)
    memo.autoscaler_evaluator = evaluator
    memo.autoscaler_task = asyncio.create_task(run_forever(evaluator), name="autoscaler")


@kopf.on.cleanup()
async def _stop_autoscaler(memo: Any, **_: Any) -> None:
    await background.stop(getattr(memo, "autoscaler_task", None))
    evaluator: Evaluator | None = getattr(memo, "autoscaler_evaluator", None)
    if evaluator is not None:
        # What the next process resumes (an upgrade's rolling update stops the leader this way).
        await evaluator.wind_down()
