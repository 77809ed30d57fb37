"""`tokenpilot` and `vllm-default-budget`: the operator's own autoscaler, run in virtual time.

Nothing of the autoscaler is here: each evaluation hands the simulated pods' /metrics to
`tokenpilot.core.autoscale.loop.step`, the state machine the operator's handler calls, and
applies the replicas it decides; the policy it evaluates is the spec's, priced at the batching
the Ready pods run, and the reconciler's resync re-tunes the engines from the status the
autoscaler wrote (fleet.service). The two policies differ only in their spec's batching (the
tuner's, or vLLM's default integers).
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot.core.autoscale.loop import PostEvent, ServiceState, step
from tokenpilot.core.autoscale.memory import SNAPSHOT_EVERY_S, restore, snapshot
from tokenpilot.core.autoscale.observation import Current, Now
from tokenpilot.core.autoscale.window import PodScrapes
from tokenpilot.core.service_event import ServiceEvent
from tokenpilot_lab.fleet.policies.base import ScaleChoice
from tokenpilot_lab.fleet.service import ServiceTuning
from tokenpilot_lab.fleet.view import FleetView

# Virtual time's wall clock (status timestamps, the memory's writes): this plus its seconds.
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class RestartMemory(enum.Enum):
    """What a restarted operator finds of a service's autoscaler."""

    shutdown = "shutdown"  # the memory the old process wrote as it stopped (an upgrade)
    periodic = "periodic"  # the memory of its last periodic write (it was killed)
    none = "none"  # nothing (an operator with no namespace of its own to write it in)


@dataclass(slots=True)
class OperatorPolicy:
    state: ServiceState
    # The service's spec and its tuning (None: the state's policy as given, never re-tuned).
    service: ServiceTuning | None = None
    name: str = "tokenpilot"
    source: MetricsSourceType = MetricsSourceType.direct
    # Virtual seconds at which the operator restarts (an upgrade, a standby's takeover): the
    # service's state starts afresh, as a new process's does, from the memory it finds; the
    # replicas stay.
    restarts_at_s: tuple[float, ...] = ()
    restart_memory: RestartMemory = RestartMemory.shutdown
    interval_s: float = field(init=False)
    # The Warning Events the operator would have posted, at their virtual seconds.
    warnings: list[tuple[float, ServiceEvent]] = field(default_factory=list, init=False)
    _num_restarts: int = field(default=0, init=False)
    _written: dict[str, Any] | None = field(default=None, init=False)
    _written_at_s: float = field(default=float("-inf"), init=False)

    def __post_init__(self) -> None:
        self.interval_s = self.state.interval_s

    def decide(self, view: FleetView) -> ScaleChoice:
        due = self.restarts_at_s[self._num_restarts :]
        if due and view.now_s >= due[0]:
            self._restart(view.now_s)
        scrapes = PodScrapes(
            at_s=view.scraped_at_s, samples=view.pods, num_pods_expected=view.num_ready
        )
        current = Current(
            spec_replicas=view.spec_replicas,
            ready_replicas=view.num_ready,
            pod_startups_s=view.pod_startups_s,
        )
        service, now = self.service, _now(view.now_s)
        if service is not None:
            self.state = replace(self.state, policy=service.policy(view.batching.values()))
        self.state, decision, actions = step(self.state, scrapes, current, now)
        for action in actions:
            if isinstance(action, PostEvent) and action.event.warning:
                self.warnings.append((view.now_s, action.event))
        periodic = self.restarts_at_s and self.restart_memory is RestartMemory.periodic
        if periodic and view.now_s >= self._written_at_s + SNAPSHOT_EVERY_S:
            self._written, self._written_at_s = snapshot(self.state, _now(view.now_s)), view.now_s
        batching = None
        if service is not None:
            batching = service.reconcile(
                view.now_s, now.wall, self.state.applied, rolling_out=view.rolling_out
            )
        return ScaleChoice(decision.desired_replicas, decision.reason, batching)

    def notes(self) -> tuple[str, ...]:
        """The Warning Events of the run in words: each reason's first, and how many."""
        counts = Counter(event.reason for _, event in self.warnings)
        firsts: dict[str, tuple[float, ServiceEvent]] = {}
        for at_s, event in self.warnings:
            firsts.setdefault(event.reason, (at_s, event))
        return tuple(
            f"Warning {event.reason} at {at_s:.0f} s"
            + (f" (and {counts[event.reason] - 1} more)" if counts[event.reason] > 1 else "")
            + f": {event.message}"
            for at_s, event in firsts.values()
        )

    def report(self) -> dict[str, Any] | None:
        """What the service knew and did over the run (fleet.service), with what the
        autoscaler last published of the workload and the engines' costs."""
        if self.service is None:
            return None
        applied = self.state.applied or {}
        return {
            **self.service.report(),
            "workload": applied.get("workload"),
            "engine_costs": applied.get("engineCosts"),
        }

    def _restart(self, now_s: float) -> None:
        self._num_restarts += 1
        written = {
            RestartMemory.shutdown: snapshot(self.state, _now(now_s)),
            RestartMemory.periodic: self._written,
            RestartMemory.none: None,
        }[self.restart_memory]
        fresh = ServiceState(self.state.policy, interval_s=self.state.interval_s)
        self.state = fresh if written is None else restore(fresh, written, _now(now_s))


def _now(virtual_s: float) -> Now:
    wall = (_EPOCH + timedelta(seconds=virtual_s)).isoformat().replace("+00:00", "Z")
    return Now(virtual_s, wall)
