"""`aibrix-kpa`: AIBrix's KPA, the Knative Pod Autoscaler algorithm on vLLM's running requests.

AIBrix ("Autoscaling" in the AIBrix docs; pkg/controller/podautoscaler/algorithm) ports
Knative's KPA (knative.dev/serving pkg/autoscaler/scaling/autoscaler.go). Every tick:
1. Average the summed metric over the stable window (180 s) and the panic window (60 s).
2. desired_stable = ceil(stable / target), desired_panic = ceil(panic / target), both limited
   to [floor(ready / max_scale_down_rate), ceil(ready * max_scale_up_rate)].
3. Enter panic when desired_panic / ready >= panic threshold (2.0); stay until a whole stable
   window passes without that. In panic use desired_panic but never go below the highest
   count reached in this panic (no scale-down while panicking); otherwise use desired_stable.
4. AIBrix's cooldown (`stabilizeRecommendation` in pkg/controller/podautoscaler/
   podautoscaler_controller.go, vllm-project/aibrix at bda162d and 015a2e5; defaults in
   pkg/controller/podautoscaler/context/context.go: scale-up cooldown 0 s, scale-down 300 s):
   every recommendation is kept with its time; one above the current count is used as it is
   (the 0 s window holds only itself); one below takes the *smallest* recommendation of the
   last 300 s. As coded this does not delay a scale-down the way the HPA's window does: it can
   go lower than today's recommendation.
The metric is read from the pods directly at each reconcile (every 10 s, the controller's
DefaultResyncInterval), as AIBrix's metric fetcher does.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot_lab.fleet.policies.base import ScaleChoice
from tokenpilot_lab.fleet.view import FleetView

KPA_TICK_S = 10.0  # AIBrix's PodAutoscaler DefaultResyncInterval
KPA_STABLE_WINDOW_S = 180.0
KPA_PANIC_WINDOW_S = 60.0
KPA_PANIC_THRESHOLD = 2.0
KPA_MAX_SCALE_UP_RATE = 2.0
KPA_MAX_SCALE_DOWN_RATE = 2.0  # Knative's default
AIBRIX_SCALE_DOWN_COOLDOWN_S = 300.0  # ScaleDownCooldownWindow


@dataclass(slots=True)
class KpaPolicy:
    target_running_per_replica: float
    min_replicas: int
    max_replicas: int
    name: str = "aibrix-kpa"
    interval_s: float = KPA_TICK_S
    source: MetricsSourceType = MetricsSourceType.direct
    stable_window_s: float = KPA_STABLE_WINDOW_S
    panic_window_s: float = KPA_PANIC_WINDOW_S
    _samples: deque[tuple[float, float]] = field(default_factory=deque)
    _panic_since_s: float | None = None
    _max_panic_pods: int = 0
    _recommendations: deque[tuple[float, int]] = field(default_factory=deque)

    def decide(self, view: FleetView) -> ScaleChoice:
        now_s = view.now_s
        self._samples.append((now_s, float(view.total_running)))
        while self._samples and self._samples[0][0] <= now_s - self.stable_window_s:
            self._samples.popleft()
        stable = sum(v for _, v in self._samples) / len(self._samples)
        panic_values = [v for t, v in self._samples if t > now_s - self.panic_window_s]
        panic = sum(panic_values) / len(panic_values)

        ready = max(1, view.num_ready)
        max_up = math.ceil(KPA_MAX_SCALE_UP_RATE * ready)
        max_down = math.floor(ready / KPA_MAX_SCALE_DOWN_RATE)
        target = self.target_running_per_replica
        desired_stable = min(max_up, max(max_down, math.ceil(stable / target)))
        desired_panic = min(max_up, max(max_down, math.ceil(panic / target)))

        over = desired_panic / ready >= KPA_PANIC_THRESHOLD
        if over:
            self._panic_since_s = now_s
        elif self._panic_since_s is not None and now_s - self._panic_since_s > self.stable_window_s:
            self._panic_since_s = None
            self._max_panic_pods = 0

        if self._panic_since_s is not None:
            desired = max(desired_panic, self._max_panic_pods, view.spec_replicas)
            self._max_panic_pods = desired
            why = f"panic: {panic:.1f} running over {self.panic_window_s:g} s, target {target:g}"
        else:
            desired = desired_stable
            why = f"stable: {stable:.1f} running over {self.stable_window_s:g} s, target {target:g}"
        desired = self._cool_down(now_s, view.spec_replicas, desired)
        desired = max(self.min_replicas, min(self.max_replicas, desired))
        return ScaleChoice(desired, why)

    def _cool_down(self, now_s: float, current: int, recommended: int) -> int:
        """AIBrix's stabilizeRecommendation, as coded (see the module docstring)."""
        self._recommendations.append((now_s, recommended))
        cutoff_s = now_s - AIBRIX_SCALE_DOWN_COOLDOWN_S
        while self._recommendations and self._recommendations[0][0] <= cutoff_s:
            self._recommendations.popleft()
        if recommended >= current:
            return recommended
        return min(r for _, r in self._recommendations)
