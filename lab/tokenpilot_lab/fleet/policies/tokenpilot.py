"""`tokenpilot` and `vllm-default-budget`: the operator's own `decide()`, called as it calls it.

The operator's direct metrics source scrapes every Ready pod on each evaluation, keeps a ring
of samples per pod just longer than the window, and turns the rings into one `Observation`
with `core.autoscale.window.observe_rings` (gauges from the latest scrape, P99s from the summed
per-pod histogram increases); `decide()` gets it with the history of the previous call. This
policy does the same with the simulated pods' /metrics. The two policies differ only in the
engines' token budget (tuned, or vLLM's default), which the comparison sets on the engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenpilot.core.autoscale import METRICS_WINDOW_S, AutoscalePolicy, History, decide
from tokenpilot.core.autoscale.window import EngineSample, Ring, observe_rings, push
from tokenpilot_lab.fleet.policies.base import ScaleChoice
from tokenpilot_lab.fleet.view import FleetView, MetricsDelivery

# The operator's default evaluation interval (spec.autoscaling.interval).
OPERATOR_INTERVAL_S = 5.0


@dataclass(slots=True)
class TokenPilotPolicy:
    autoscale: AutoscalePolicy
    name: str = "tokenpilot"
    interval_s: float = OPERATOR_INTERVAL_S
    source: MetricsDelivery = MetricsDelivery.pods
    window_s: float = METRICS_WINDOW_S
    history: History = field(default_factory=History)
    _rings: dict[str, Ring] = field(default_factory=dict)

    def decide(self, view: FleetView) -> ScaleChoice:
        rings: dict[str, Ring] = {}
        for pod in view.pods:
            sample = EngineSample(
                at_s=pod.at_s,
                num_requests_waiting=float(pod.num_requests_waiting),
                num_requests_running=float(pod.num_requests_running),
                kv_cache_usage=pod.kv_cache_usage,
                itl_buckets=pod.itl_buckets,
                ttft_buckets=pod.ttft_buckets,
            )
            rings[pod.name] = push(self._rings.get(pod.name, ()), sample, self.window_s)
        # Pods that left (removed, or no longer Ready) drop out of the rings, as in the source.
        self._rings = rings
        observation = observe_rings(
            rings,
            observed_at_s=view.scraped_at_s,
            desired_replicas=view.spec_replicas,
            ready_replicas=view.num_ready,
            num_pods_expected=view.num_ready,
        )
        decision = decide(self.autoscale, self.history, observation, view.now_s)
        self.history = decision.history
        return ScaleChoice(decision.desired_replicas, decision.reason)
