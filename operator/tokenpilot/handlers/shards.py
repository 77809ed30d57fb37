"""The autoscaler with its services split across replicas (`--autoscaler-shards`): it runs in
every replica, leader and standbys alike, outside kopf, on the shards this replica holds
(adapters/kube/shards.py); kopf (the reconciler, calibration) stays with the operator's Lease.

Two threads: the shard keeper (its Leases, every retry period) and the autoscaler's own event
loop (runtime.evaluator's rounds over the services of the shards held). Stopping writes every
held service's memory, then releases the shards so the other replicas take them at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field

from tokenpilot.adapters.kube import connect
from tokenpilot.adapters.kube.shards import ShardKeeper
from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.handlers import background
from tokenpilot.handlers.leadership import LeaderElection
from tokenpilot.handlers.reconcile import Runtime
from tokenpilot.runtime.evaluator import MEMORY_WRITE_AT_STOP_S, Evaluator, run_forever
from tokenpilot.runtime.service_loop import AutoscalerConfig, AutoscalerRuntime

log = logging.getLogger("tokenpilot.autoscaler")


@dataclass
class ShardedAutoscaler:
    shared: Runtime
    metrics: OperatorMetrics
    election: LeaderElection
    kubeconfig: str | None
    shards: int
    replicas: int
    config: AutoscalerConfig
    keeper: ShardKeeper | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False)
    _stopping: asyncio.Event | None = field(default=None, init=False)
    _started: threading.Event = field(default_factory=threading.Event, init=False)

    def start(self) -> None:
        client = connect(self.kubeconfig, user_agent=f"{self.election.user_agent}-shards")
        self.keeper = ShardKeeper(
            client,
            self.election.lease,
            self.election.identity,
            self.shards,
            self.replicas,
            self.election.timing,
            clock=self.shared.clock,
        )
        self.keeper.start()
        self._thread = threading.Thread(target=self._run, name="autoscaler", daemon=True)
        self._thread.start()
        self._started.wait(10.0)

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(MEMORY_WRITE_AT_STOP_S + 5.0)
        if self.keeper is not None:
            self.keeper.stop()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        assert self.keeper is not None
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._started.set()
        runtime = AutoscalerRuntime(self.config, metrics=self.metrics, clock=self.shared.clock)
        evaluator = Evaluator(
            runtime,
            self.shared.client,
            tuple(self.shared.namespaces),
            self.shared.by_name,
            shards=self.keeper,
        )
        evaluator.watch(self.shared.services)
        rounds = asyncio.create_task(run_forever(evaluator), name="autoscaler")
        try:
            await self._stopping.wait()
        finally:
            await background.stop(rounds)
            await evaluator.wind_down()
