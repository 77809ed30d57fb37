"""The autoscaling policy: bounds, targets, windows and step limits, with the default reasons.

A policy is a plain frozen value. The operator builds one from an LLMService's `spec.autoscaling`
and `spec.slo`; the fleet simulator builds them directly. Defaults and why (the measurements
behind them: docs/autoscaling.md, *Defaults and why*):

- `target_queue_per_replica = 4.0`: vLLM admits waiting requests at the next step when a batch
  slot and KV blocks are free, so a few waiting requests per engine are arrival jitter; a queue
  that stays above a handful means the engine is full and every new request pays a whole
  request's worth of waiting in its TTFT.
- `itl_p99_slo_s` / `ttft_p99_slo_s`: none by default; they come from `spec.slo`. A signal with
  no objective is reported but does not drive scaling.
- `panic_ratio = 2.0`: a latency at twice its SLO, or a queue at twice its target over two
  evaluations, is not noise; waiting would only make the backlog longer, so panic skips the
  scale-up window and may double the fleet in one step.
- The queue needs two readings: it is a gauge read at one instant, and a burst one scrape
  catches is admitted within a second at a tuned budget. The queue counts as the smaller of
  this evaluation's reading and the previous one's: a real backlog is still there one interval
  later, and the windowed P99s act in the evaluation that sees them.
- `scale_up_stabilization_s = 0`: react in the evaluation that sees the breach; counting the
  replicas that are starting is what prevents repeated scale-ups.
- `max_scale_up_step = 4`: outside panic, at most four replicas per decision, so one bad sample
  cannot claim a rack of GPUs; panic allows `max(4, current)` (doubling).
- `scale_down_stabilization_s = 300`: the calm window Kubernetes' HPA uses; a replica removed
  too early costs a model load to bring back, one kept too long costs minutes of GPU time.
- Scale-down gate, as the smaller fleet would see it. A replica may go only when (1) each
  latency is provably under its SLO now (the upper edge of the bucket that holds the P99 is at
  most the SLO), (2) the queue spread over one replica fewer is at most `scale_down_ratio = 0.5`
  of its target, and (3) each P99, scaled by the load each remaining replica would carry (the
  ready replicas over the replicas left), is at most `scale_down_latency_ratio = 1.0` of its
  SLO. The projection is the hysteresis: a decode step costs a fixed part (the weight read)
  plus a part per running sequence, so scaling the whole step by the load ratio over-estimates
  the step after the move. Tests (1) and (3) are skipped when the smaller fleet still gives
  every request an engine of its own (no more requests in flight than replicas left): no step
  then carries more than one sequence, so no latency depends on the fleet size, and a GPU
  whose bare decode step fills a whole ITL bucket can still give replicas back.
- A TTFT breach with the ITL within its SLO and no more requests in flight than engines is the
  prompts' own prefill: more replicas cannot shorten it, so decide() holds (`PrefillBound`).
- `max_scale_down_step = 1` and `scale_down_step_interval_s = 30`: after the window, remove one
  replica at a time and let the new load settle for a metrics window before the next.
- `max_observation_age_s = 15`: three default intervals; an older observation is stale and the
  autoscaler holds rather than act on a past it cannot confirm.

`min_replicas` is at least 1: with no engine running there is no metric to scale up from.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.errors import InvalidSpec

# The window every metrics source computes P99s and rates over, whether it scrapes pods itself
# or asks Prometheus: six 5 s intervals, enough scrapes for a P99 at modest load while a burst
# still shows within one evaluation. The fleet simulator observes over the same window.
METRICS_WINDOW_S = 30.0


class InvalidPolicy(InvalidSpec):
    """spec.autoscaling (or a simulated policy) contradicts itself; the message names the field."""


@dataclass(frozen=True, slots=True)
class AutoscalePolicy:
    """What the autoscaler aims for and how fast it may move. See the module docstring."""

    min_replicas: int = 1
    max_replicas: int = 4
    target_queue_per_replica: float = 4.0
    itl_p99_slo_s: float | None = None
    ttft_p99_slo_s: float | None = None
    panic_ratio: float = 2.0
    scale_up_stabilization_s: float = 0.0
    max_scale_up_step: int = 4
    scale_down_stabilization_s: float = 300.0
    scale_down_ratio: float = 0.5
    scale_down_latency_ratio: float = 1.0
    max_scale_down_step: int = 1
    scale_down_step_interval_s: float = 30.0
    max_observation_age_s: float = 15.0
    # How long a replica asked for now takes to serve (image, weights, CUDA graphs), until the
    # service's own pods have shown it (core.autoscale.plan.StartupMemory): the horizon the
    # demand is forecast over.
    startup_s: float = 90.0
    # The share of requests that must meet the SLOs (spec.slo.attainment): how busy an
    # interval of the recent past the fleet must keep up with.
    attainment: float = 0.99
    # One replica priced by the step model at its budget and SLOs; None when the GPU or the
    # budget is unknown, and the autoscaler then scales on the SLO signals alone.
    replica_model: ReplicaModel | None = None

    def __post_init__(self) -> None:
        if self.min_replicas < 1:
            raise InvalidPolicy("minReplicas must be >= 1 (no engine, no metrics to scale on)")
        if self.max_replicas < self.min_replicas:
            raise InvalidPolicy(
                f"maxReplicas ({self.max_replicas}) must be >= minReplicas ({self.min_replicas})"
            )
        if not self.target_queue_per_replica > 0:
            raise InvalidPolicy("targetQueueDepthPerReplica must be > 0")
        for name, slo in (
            ("spec.slo.itlP99", self.itl_p99_slo_s),
            ("spec.slo.ttftP99", self.ttft_p99_slo_s),
        ):
            if slo is not None and not slo > 0:
                raise InvalidPolicy(f"{name} must be a positive duration")
        if not self.panic_ratio > 1:
            raise InvalidPolicy("panic_ratio must be > 1 (it multiplies the target)")
        if not 0 < self.scale_down_ratio < 1:
            raise InvalidPolicy("scale_down_ratio must be in (0, 1) to leave a hysteresis band")
        if not 0 < self.scale_down_latency_ratio <= 1:
            raise InvalidPolicy(
                "scale_down_latency_ratio must be in (0, 1]: a projection over the SLO is a breach"
            )
        if self.max_scale_up_step < 1 or self.max_scale_down_step < 1:
            raise InvalidPolicy("max_scale_up_step and max_scale_down_step must be >= 1")
        for name, seconds in (
            ("scaleUpStabilization", self.scale_up_stabilization_s),
            ("scaleDownStabilization", self.scale_down_stabilization_s),
            ("scale_down_step_interval_s", self.scale_down_step_interval_s),
        ):
            if seconds < 0:
                raise InvalidPolicy(f"{name} must be >= 0 seconds")
        if not self.max_observation_age_s > 0:
            raise InvalidPolicy("max_observation_age_s must be > 0")
        if self.startup_s < 0:
            raise InvalidPolicy(
                "startup_s (the start-up assumed until one is measured) must be >= 0"
            )
        if not 0 < self.attainment <= 1:
            raise InvalidPolicy("spec.slo.attainment must be in (0, 1]")

    def clamp(self, replicas: int) -> int:
        """`replicas` forced into [min_replicas, max_replicas]."""
        return max(self.min_replicas, min(self.max_replicas, replicas))
