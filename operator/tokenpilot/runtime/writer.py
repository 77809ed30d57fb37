"""Where one autoscaler's decisions land: the actions of `core.autoscale.loop.step` carried out
against the API server, for a service scaled as one pool or for one pool of a split service.

    ScaleTo       spec.replicas through the scale subresource; a pool's
                  spec.disaggregation.<role>.replicas (a merge patch of that field)
    PostEvent     the Event, a pool's message naming the pool
    ApplyStatus   what the autoscaler owns in status, under its field manager; a pool's under
                  status.phases.<role> with its conditions named for it (core.autoscale.report
                  .phase_owned), under a field manager of its own

An API error stops the remaining actions; the caller keeps what it applied before, and the next
evaluation is the retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.adapters.clock import Clock
from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.events import post_event
from tokenpilot.adapters.kube.scale import write_phase_replicas, write_scale
from tokenpilot.adapters.kube.status import AUTOSCALER, apply_status
from tokenpilot.core.autoscale.loop import Action, ApplyStatus, PostEvent, ScaleTo
from tokenpilot.core.autoscale.report import phase_owned
from tokenpilot.core.service_event import ServiceEvent

log = logging.getLogger("tokenpilot.autoscaler")


@dataclass(frozen=True)
class Writer:
    """One autoscaler's writes: the service's (`role` None) or one pool's."""

    client: KubeClient
    namespace: str
    name: str
    clock: Clock
    role: str | None = None

    @property
    def field_manager(self) -> str:
        """Each writer applies only what it owns; two pools' writers own disjoint fields."""
        return AUTOSCALER if self.role is None else f"{AUTOSCALER}-{self.role}"

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}" + ("" if self.role is None else f" {self.role}")

    async def carry_out(
        self,
        actions: Sequence[Action],
        uid: str | None,
        *,
        split: Callable[[], Mapping[str, Any] | None] | None = None,
    ) -> bool:
        """The actions in order; False where an API call failed and the rest were not carried
        out. `uid`: the service's, for its Events (None: none are posted). `split`: what a
        pool's status says of the split besides its own decision (status.phases)."""
        try:
            for action in actions:
                if isinstance(action, ScaleTo):
                    await asyncio.to_thread(self._scale, action.replicas)
                    log.info("%s: %d -> %d", self.where, action.spec_replicas, action.replicas)
                elif isinstance(action, PostEvent) and uid is not None:
                    await asyncio.to_thread(
                        post_event,
                        self.client,
                        namespace=self.namespace,
                        name=self.name,
                        uid=uid,
                        event=self._event(action.event),
                        now=self.clock.now_rfc3339(),
                    )
                elif isinstance(action, ApplyStatus):
                    owned = (
                        action.owned
                        if self.role is None
                        else phase_owned(self.role, action.owned, split() if split else None)
                    )
                    await asyncio.to_thread(self._apply, owned)
        except KubeError as error:
            log.warning("%s: cannot apply decision: %s", self.where, error)
            return False
        return True

    async def release(self) -> None:
        """Give up everything this writer owns in status (an empty apply removes it): the loop
        that wrote it no longer runs, so nobody reads a decision no one makes."""
        try:
            await asyncio.to_thread(self._apply, {})
        except KubeError as error:
            log.warning("%s: cannot release its status: %s", self.where, error)

    def _scale(self, replicas: int) -> None:
        if self.role is None:
            write_scale(self.client, self.namespace, self.name, replicas)
        else:
            write_phase_replicas(self.client, self.namespace, self.name, self.role, replicas)

    def _event(self, event: ServiceEvent) -> ServiceEvent:
        if self.role is None:
            return event
        return ServiceEvent(event.reason, f"{self.role} pool: {event.message}", event.warning)

    def _apply(self, owned: dict[str, Any]) -> None:
        apply_status(
            self.client, self.namespace, self.name, owned, field_manager=self.field_manager
        )
