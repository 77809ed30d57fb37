"""`tokenpilot` and `vllm-default-budget`: the operator's own autoscaler, run in virtual time.

Nothing of the autoscaler is here: each evaluation hands the simulated pods' /metrics to
`tokenpilot.core.autoscale.loop.step`, the state machine the operator's handler calls, and
applies the replicas it decides. The two policies differ only in the engines' token budget
(tuned, or vLLM's default), which the comparison sets on the engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenpilot.core.autoscale.loop import Current, Now, ServiceState, step
from tokenpilot.core.autoscale.window import EngineSample, PodScrapes
from tokenpilot_lab.fleet.policies.base import ScaleChoice
from tokenpilot_lab.fleet.view import FleetView, MetricsDelivery, PodSample

# Status timestamps are the wall clock's; virtual time has none, and nothing here reads them.
_WALL = "1970-01-01T00:00:00Z"


@dataclass(slots=True)
class OperatorPolicy:
    state: ServiceState
    name: str = "tokenpilot"
    source: MetricsDelivery = MetricsDelivery.pods
    # Virtual seconds at which the operator restarts (an upgrade, a standby's takeover): the
    # service's state starts afresh, as a new process's does; the replicas stay.
    restarts_at_s: tuple[float, ...] = ()
    interval_s: float = field(init=False)
    _num_restarts: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.interval_s = self.state.interval_s

    def decide(self, view: FleetView) -> ScaleChoice:
        due = self.restarts_at_s[self._num_restarts :]
        if due and view.now_s >= due[0]:
            self._num_restarts += 1
            self.state = ServiceState(self.state.policy, interval_s=self.state.interval_s)
        scrapes = PodScrapes(
            at_s=view.scraped_at_s,
            samples={pod.name: engine_sample(pod) for pod in view.pods},
            num_pods_expected=view.num_ready,
        )
        current = Current(spec_replicas=view.spec_replicas, ready_replicas=view.num_ready)
        self.state, decision, _ = step(self.state, scrapes, current, Now(view.now_s, _WALL))
        return ScaleChoice(decision.desired_replicas, decision.reason)


def engine_sample(pod: PodSample) -> EngineSample:
    """What the direct source's parser reads from a pod's page."""
    return EngineSample(
        at_s=pod.at_s,
        num_requests_waiting=float(pod.num_requests_waiting),
        num_requests_running=float(pod.num_requests_running),
        kv_cache_usage=pod.kv_cache_usage,
        itl_buckets=pod.itl_buckets,
        ttft_buckets=pod.ttft_buckets,
        prompt_tokens_total=float(pod.prompt_tokens_total),
        cached_prompt_tokens_total=float(pod.cached_prompt_tokens_total),
        output_tokens_total=float(pod.output_tokens_total),
        requests_total=float(pod.requests_total),
    )
