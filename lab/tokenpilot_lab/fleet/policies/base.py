"""What the fleet simulator asks of an autoscaling policy under test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot_lab.fleet.view import FleetView


@dataclass(frozen=True, slots=True)
class ScaleChoice:
    """A policy's answer: the replica count it wants and why, in words; and the batching the
    engines are to move to, (token budget, max_num_seqs), when it re-tunes them."""

    replicas: int
    reason: str
    batching: tuple[int, int] | None = None


class FleetPolicy(Protocol):
    """A stateful autoscaler evaluated every `interval_s` seconds of virtual time.

    One instance serves one run: windows and stabilization state live on the instance.
    """

    name: str
    interval_s: float
    source: MetricsSourceType

    def decide(self, view: FleetView) -> ScaleChoice: ...
