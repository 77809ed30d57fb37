"""What the loop hands decide(): an observation, with the plan's need where a forecast sizes the
fleet (core.autoscale.plan.need, as loop.step computes it)."""

from __future__ import annotations

from tokenpilot.core.autoscale import AutoscalePolicy, Evidence, Observation
from tokenpilot.core.autoscale.demand import Forecast
from tokenpilot.core.autoscale.pace import PaceMemory
from tokenpilot.core.autoscale.plan import DemandMemory, need


def sized(
    policy: AutoscalePolicy, observation: Observation, outlook: Forecast | None, now_s: float
) -> Evidence:
    """`observation` with the need the policy's replica model finds for `outlook`, on engines
    at their profile's pace, in a memory of this process's own."""
    return Evidence(observation, need(policy, DemandMemory(outlook=outlook), PaceMemory(), now_s))
