"""`tokenpilot` and `vllm-default-budget`: the operator's own `decide()`, called as it calls it.

The operator evaluates every few seconds from a direct scrape of the Ready pods: waiting and
running requests summed over pods, ITL and TTFT P99 from vLLM's histogram bucket increases over
a window (`core.histogram.quantile`, with the bucket's upper edge as the bound), and threads
`Decision.history` into the next call. The two policies differ only in the engines' token
budget (tuned by the tuner, or vLLM's default), which the comparison sets on the engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenpilot.core.autoscale import (
    AutoscalePolicy,
    History,
    LatencyQuantile,
    Observation,
    decide,
)
from tokenpilot.core.fleet.policies.base import ScaleChoice
from tokenpilot.core.fleet.view import FleetView, MetricsSource
from tokenpilot.core.histogram import Bucket, quantile

# How often the operator evaluates and over what window it reads latency histograms; keep in
# step with the operator's autoscaling timer.
OPERATOR_INTERVAL_S = 5.0
OPERATOR_WINDOW_S = 30.0


def latency_p99(buckets: tuple[Bucket, ...]) -> LatencyQuantile:
    estimate = quantile(0.99, buckets)
    return LatencyQuantile(
        p99_s=estimate.value,
        num_observations=buckets[-1][1] if buckets else 0.0,
        upper_bound_s=estimate.upper_bound,
    )


@dataclass(slots=True)
class TokenPilotPolicy:
    autoscale: AutoscalePolicy
    name: str = "tokenpilot"
    interval_s: float = OPERATOR_INTERVAL_S
    source: MetricsSource = MetricsSource.pods
    window_s: float = OPERATOR_WINDOW_S
    history: History = field(default_factory=History)

    def decide(self, view: FleetView) -> ScaleChoice:
        pods = view.pods
        observation = Observation(
            observed_at_s=view.scraped_at_s,
            desired_replicas=view.spec_replicas,
            ready_replicas=view.num_ready,
            num_pods_expected=view.num_ready,
            num_pods_scraped=len(pods),
            num_requests_waiting=float(view.total_waiting),
            num_requests_running=float(view.total_running),
            itl=latency_p99(view.itl_window),
            ttft=latency_p99(view.ttft_window),
            kv_cache_usage=(sum(p.kv_cache_usage for p in pods) / len(pods) if pods else None),
            window_s=view.window_s,
        )
        decision = decide(self.autoscale, self.history, observation, view.now_s)
        self.history = decision.history
        return ScaleChoice(decision.desired_replicas, decision.reason)
