"""The SLO autoscaler's decision, as pure data: policy + history + observation + now -> Decision.

Purely data-manipulative: no I/O, no clock. The operator's timer and the fleet simulator call
`decide` the same way and thread `Decision.history` into the next call:

    history = History()
    decision = decide(policy, history, observation, now_s)
    history = decision.history
"""

from tokenpilot.core.autoscale.algorithm import decide
from tokenpilot.core.autoscale.decision import Decision, Mode, Reason, Signals
from tokenpilot.core.autoscale.observation import History, LatencyQuantile, Observation
from tokenpilot.core.autoscale.policy import METRICS_WINDOW_S, AutoscalePolicy, InvalidPolicy

__all__ = [
    "METRICS_WINDOW_S",
    "AutoscalePolicy",
    "Decision",
    "History",
    "InvalidPolicy",
    "LatencyQuantile",
    "Mode",
    "Observation",
    "Reason",
    "Signals",
    "decide",
]
