"""What decide() returns: the replica count, the mode, the reason (a code and words), the
signals it used and the history to pass to the next call; and what "blind" means.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tokenpilot.api.llmservice import ConditionStatus
from tokenpilot.core.autoscale.figures import approx
from tokenpilot.core.autoscale.observation import History


class Mode(StrEnum):
    """The autoscaler's posture in one evaluation."""

    steady = "steady"  # nothing to do: within targets, or calm but still inside the window
    scale_up = "scale-up"
    panic = "panic"  # a large breach: scaled up without waiting for the window
    scale_down = "scale-down"
    hold = "hold"  # wanted to act (or could not see) and kept the replicas as they are


class Reason(StrEnum):
    """A closed set of reason codes: Event reasons and the `reason` label of the decisions
    counter. The words in `Decision.reason` carry the figures.
    """

    below_min = "BelowMinReplicas"
    above_max = "AboveMaxReplicas"
    stale_metrics = "StaleMetrics"
    missing_metrics = "MissingMetrics"
    partial_scrape = "PartialScrape"
    no_ready_pods = "NoReadyPods"
    awaiting_second_scrape = "AwaitingSecondScrape"
    queue_over_target = "QueueOverTarget"
    itl_over_slo = "ItlOverSlo"
    ttft_over_slo = "TtftOverSlo"
    confirming = "ConfirmingBreach"
    queue_spike = "QueueSpike"
    capacity_starting = "CapacityStarting"
    at_max = "AtMaxReplicas"
    prefill_bound = "PrefillBound"
    within_targets = "WithinTargets"
    stabilizing = "StabilizingScaleDown"
    sustained_headroom = "SustainedHeadroom"
    model_headroom = "ModelHeadroom"
    predicted_demand = "PredictedDemand"
    # The spec cannot be turned into a policy: the replicas are kept as they are.
    invalid_spec = "InvalidSpec"


@dataclass(frozen=True, slots=True)
class Blindness:
    """What a blind hold means to the user: the MetricsAvailable condition's status and words,
    and whether entering it is worth a Warning Event."""

    condition_status: ConditionStatus
    words: str
    warns: bool


# The one definition of "blind": the holds in which the autoscaler could not see the service.
# Each restarts the windows (nothing seen before the gap counts towards a later move), sets
# MetricsAvailable to the status given, and warns when the user has something to fix.
BLIND: dict[Reason, Blindness] = {
    Reason.missing_metrics: Blindness(
        ConditionStatus.false, "a signal the autoscaler needs is missing", warns=True
    ),
    Reason.stale_metrics: Blindness(
        ConditionStatus.false, "the latest metrics are too old", warns=True
    ),
    Reason.partial_scrape: Blindness(
        ConditionStatus.false, "not every ready engine pod could be read", warns=True
    ),
    Reason.no_ready_pods: Blindness(
        ConditionStatus.unknown, "no engine pod is ready to be read", warns=False
    ),
    # A new pod's P99 needs a second scrape: nothing is wrong yet, so no Warning.
    Reason.awaiting_second_scrape: Blindness(
        ConditionStatus.unknown,
        "a P99 needs two scrapes of a pod; waiting for the second",
        warns=False,
    ),
}


@dataclass(frozen=True, slots=True)
class Signals:
    """The figures behind a decision. Ratios are signal / target (1.0 = at target); a ratio is
    None when its signal was missing or has no target, and 0.0 when the window was idle.

    `queue_per_replica` is this evaluation's reading; `queue_ratio` is the queue as decide()
    counts it (the smaller of two consecutive readings); `queue_spike_ratio` is this reading
    alone over target.
    """

    ready_replicas: int
    starting_replicas: int
    num_pods_scraped: int
    queue_per_replica: float | None = None
    queue_ratio: float | None = None
    queue_spike_ratio: float | None = None
    itl_p99_s: float | None = None
    itl_ratio: float | None = None
    ttft_p99_s: float | None = None
    ttft_ratio: float | None = None
    kv_cache_usage: float | None = None
    # Latencies read over their SLO only by interpolation inside a bucket that holds the SLO
    # (name, the bucket's lower and upper edge, s); counted at the SLO, and only where a
    # capacity model sizes the fleet.
    unproven: tuple[tuple[str, float, float], ...] = ()

    @property
    def pressure(self) -> float:
        """The largest ratio: how far over (or under) target the service is as a whole."""
        ratios = [r for r in (self.queue_ratio, self.itl_ratio, self.ttft_ratio) if r is not None]
        return max(ratios, default=0.0)


@dataclass(frozen=True, slots=True)
class PrefillBound:
    """A P99 TTFT over its SLO set by prompt length: every request in flight has an engine to
    itself, so its TTFT is its own prefill, which no replica count shortens."""

    ttft_p99_s: float
    ttft_slo_s: float
    in_flight_per_replica: float

    def __str__(self) -> str:
        return (
            f"P99 TTFT {approx(self.ttft_p99_s)} s over the {self.ttft_slo_s:g} s SLO with "
            f"{approx(self.in_flight_per_replica)} requests in flight per replica: each has an "
            "engine to itself, so its TTFT is its own prefill, set by prompt length; more "
            "replicas cannot shorten one prefill"
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """One evaluation's outcome. `history` is what to pass to the next decide() call;
    `prefill_bound` is set when a TTFT breach no fleet size shortens shaped it."""

    desired_replicas: int
    mode: Mode
    reason_code: Reason
    reason: str
    signals: Signals
    history: History
    prefill_bound: PrefillBound | None = None
