"""The Kubernetes HorizontalPodAutoscaler (autoscaling/v2) replica calculation and behavior.

As documented in "Horizontal Pod Autoscaling" (kubernetes.io/docs/tasks/run-application/
horizontal-pod-autoscale/) and implemented in pkg/controller/podautoscaler:
1. ratio = metric / target. Within the tolerance (0.1) of 1.0, keep the current count.
2. Pods metrics: pods without a sample (not Ready yet) count as 0 when scaling up and as
   exactly at target when scaling down; if that flips the direction or lands within the
   tolerance, keep the current count. Otherwise desired = ceil(ratio * pods counted).
   External metrics with an AverageValue target: desired = ceil(total / target).
3. Behavior defaults: scale-up with no stabilization, at most max(100 %, 4 pods) per 15 s;
   scale-down to the highest recommendation of the last 300 s (stabilization), at most 100 %
   per 15 s. Then clamp to [min, max].
   An HPA with no `behavior` at all (what KEDA creates unless told otherwise) takes the
   controller's older path instead: the same 300 s scale-down stabilization, and scale-up
   capped at max(2 x current, 4) replicas per sync (`normalizeDesiredReplicas`,
   `scaleUpLimitFactor` 2.0 and `scaleUpLimitMinimum` 4.0 in pkg/controller/podautoscaler/
   horizontal.go).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

HPA_SYNC_PERIOD_S = 15.0  # --horizontal-pod-autoscaler-sync-period
HPA_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
SCALE_UP_MAX_PODS = 4  # behavior.scaleUp.policies: Pods 4 per 15 s
SCALE_UP_MAX_PERCENT = 100.0  # behavior.scaleUp.policies: Percent 100 per 15 s
SCALE_DOWN_STABILIZATION_S = 300.0  # behavior.scaleDown.stabilizationWindowSeconds
LEGACY_SCALE_UP_FACTOR = 2.0  # scaleUpLimitFactor, without a behavior
LEGACY_SCALE_UP_MINIMUM = 4  # scaleUpLimitMinimum, without a behavior


def pods_metric_recommendation(
    current: int, samples: list[float], num_missing: int, target: float
) -> tuple[int, str]:
    """Recommendation for an AverageValue pods metric (step 2 above)."""
    if not samples:
        return current, "no pod reported the metric; keeping the current count"
    usage = sum(samples) / len(samples)
    ratio = usage / target
    if abs(ratio - 1.0) <= HPA_TOLERANCE and num_missing == 0:
        return current, f"average {usage:.2f} within tolerance of target {target:g}"
    if num_missing:
        if ratio > 1.0:
            padded = sum(samples) / (len(samples) + num_missing)
        else:
            padded = (sum(samples) + target * num_missing) / (len(samples) + num_missing)
        new_ratio = padded / target
        if abs(new_ratio - 1.0) <= HPA_TOLERANCE or (new_ratio > 1.0) != (ratio > 1.0):
            return current, (
                f"average {usage:.2f} vs target {target:g}, but {num_missing} starting pod(s) "
                "would undo the change"
            )
        desired = math.ceil(new_ratio * (len(samples) + num_missing))
        return desired, f"average {usage:.2f} per pod vs target {target:g} (missing pods padded)"
    desired = math.ceil(ratio * len(samples))
    return desired, f"average {usage:.2f} per pod vs target {target:g}"


def external_average_recommendation(current: int, total: float, target: float) -> tuple[int, str]:
    """Recommendation for an External metric with an AverageValue target."""
    ratio = total / (target * current) if current else math.inf
    if abs(ratio - 1.0) <= HPA_TOLERANCE:
        return current, f"total {total:g} within tolerance of {target:g} x {current} pods"
    return math.ceil(total / target), f"total {total:g} / target {target:g} per pod"


@dataclass(slots=True)
class HpaBehavior:
    """The default `behavior` of autoscaling/v2: stabilization and rate limits."""

    min_replicas: int
    max_replicas: int
    scale_down_stabilization_s: float = SCALE_DOWN_STABILIZATION_S
    # No `behavior` in the HPA's spec: the controller's legacy scale-up limit.
    legacy: bool = False
    _recommendations: deque[tuple[float, int]] = field(default_factory=deque)

    def apply(self, now_s: float, current: int, recommended: int) -> int:
        if not self._recommendations:
            # The trace is cut from a longer day: the controller has been recommending the
            # current count for a whole window already, so it cannot drop at its first sync.
            self._recommendations.append((now_s, current))
        self._recommendations.append((now_s, recommended))
        horizon_s = now_s - self.scale_down_stabilization_s
        while self._recommendations and self._recommendations[0][0] < horizon_s:
            self._recommendations.popleft()
        desired = recommended
        if recommended < current:
            # Scale down only to the highest recommendation in the window.
            desired = min(current, max(r for _, r in self._recommendations))
        if desired > current:
            if self.legacy:
                limit = max(math.ceil(LEGACY_SCALE_UP_FACTOR * current), LEGACY_SCALE_UP_MINIMUM)
            else:
                limit = max(
                    current + SCALE_UP_MAX_PODS,
                    math.ceil(current * (1 + SCALE_UP_MAX_PERCENT / 100)),
                )
            desired = min(desired, limit)
        return max(self.min_replicas, min(self.max_replicas, desired))
