"""What the engine needs from a step-time model: the duration of one iteration.

It is the operator's own contract (`tokenpilot.core.roofline.StepPricer`), under the name the
lab's engine has always used for it; `ScaledPricer` makes engines slower than their
profile prices them, the error a real GPU profile can carry.
"""

from __future__ import annotations

from tokenpilot.core.roofline import ScaledPricer
from tokenpilot.core.roofline import StepPricer as StepTimer

__all__ = ["ScaledPricer", "StepTimer"]
