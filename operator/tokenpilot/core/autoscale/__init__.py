"""The SLO autoscaler, as pure data: one service's evaluation is `loop.step`.

    step(state, samples, current, now) -> (state, decision, actions)

composes three parts: the plan (core.autoscale.plan: what the load and the engines showed, and
the fleet the step model sizes for the forecast), the feedback (core.autoscale.algorithm:
`decide`, the SLO signals against their targets, bounded) and the report
(core.autoscale.report: status, conditions and Events). No I/O, no clock: the operator's
handler and the fleet simulator call `step` the same way and thread its state into the next
call.
"""

from tokenpilot.core.autoscale.algorithm import Evidence, decide
from tokenpilot.core.autoscale.decision import Decision, Mode, Reason, Signals
from tokenpilot.core.autoscale.observation import History, LatencyQuantile, Observation
from tokenpilot.core.autoscale.policy import METRICS_WINDOW_S, AutoscalePolicy, InvalidPolicy

__all__ = [
    "METRICS_WINDOW_S",
    "AutoscalePolicy",
    "Decision",
    "Evidence",
    "History",
    "InvalidPolicy",
    "LatencyQuantile",
    "Mode",
    "Observation",
    "Reason",
    "Signals",
    "decide",
]
