"""`tokenpilot demo`: the SLO autoscaler at work on the dev cluster, end to end.

settings.py   the LLMService and the load, with the reasons for each figure
stack.py      dev cluster, CRD, operator process and service: up, and down on any exit
observe.py    one sample a second of replicas, queue and P99 ITL; feeds the balancer
view.py       the live terminal view (rich)
summary.py    milestones and per-phase P99s from samples and request records (pure)
timeline.py   the PNG timeline (matplotlib)
run.py        the whole run; its last line of output is one JSON object
"""

from tokenpilot_lab.demo.run import run_demo
from tokenpilot_lab.demo.settings import DemoSettings

__all__ = ["DemoSettings", "run_demo"]
