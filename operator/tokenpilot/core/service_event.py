"""An Event an LLMService gets, as data; the kube adapter posts it (adapters/kube/events.py).

The reconciler words its own (core.events), the autoscaler its own (core.autoscale.report);
both speak through this one value.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServiceEvent:
    reason: str
    message: str
    warning: bool = False
