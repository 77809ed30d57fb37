"""The SLO signals of one observation against their targets, and their words.

ITL and TTFT are P99 / SLO (0.0 when the window had no traffic). The queue (waiting requests
per scraped pod / target) counts as the smaller of this reading and the previous evaluation's,
so a burst one engine clears between two scrapes moves nothing, and a backlog acts within two
intervals of appearing. Pressure is the largest counted ratio. Where a capacity model sizes the
fleet, a P99 read over its SLO only by interpolation inside the bucket that holds the SLO counts
at the SLO: the bucket's edges cannot tell which side the exact P99 is on (vLLM's TTFT buckets
1.0 and 2.5 s around a 2 s SLO). Without a model the interpolated P99 is the only scale-up
signal and counts.
"""

from __future__ import annotations

import math

from tokenpilot.core.autoscale.decision import Reason, Signals
from tokenpilot.core.autoscale.figures import approx
from tokenpilot.core.autoscale.observation import LatencyQuantile, Observation
from tokenpilot.core.autoscale.policy import AutoscalePolicy


def read_signals(
    policy: AutoscalePolicy,
    observation: Observation,
    last_queue_per_replica: float | None,
    *,
    proven_only: bool,
) -> Signals:
    """The signals of `observation`, the queue counted with the previous reading. With
    `proven_only` (a capacity model sizes the fleet) a P99 over its SLO counts as a breach only
    where its bucket's edges prove it."""
    scraped = observation.num_pods_scraped
    waiting = observation.num_requests_waiting
    queue_per_replica = None
    if waiting is not None and math.isfinite(waiting) and scraped > 0:
        queue_per_replica = waiting / scraped
    target = policy.target_queue_per_replica
    spike_ratio = None if queue_per_replica is None else queue_per_replica / target
    queue_ratio = spike_ratio
    if spike_ratio is not None:
        # Only a queue that outlasts one evaluation interval counts.
        queue_ratio = min(spike_ratio, (last_queue_per_replica or 0.0) / target)
    itl_p99_s, itl_ratio = _latency(observation.itl, policy.itl_p99_slo_s)
    ttft_p99_s, ttft_ratio = _latency(observation.ttft, policy.ttft_p99_slo_s)
    unproven: list[tuple[str, float, float]] = []
    if proven_only:
        for name, quantile, slo_s in (
            ("ITL", observation.itl, policy.itl_p99_slo_s),
            ("TTFT", observation.ttft, policy.ttft_p99_slo_s),
        ):
            if _unproven(quantile, slo_s) and quantile is not None:
                assert quantile.lower_bound_s is not None and quantile.upper_bound_s is not None
                unproven.append((name, quantile.lower_bound_s, quantile.upper_bound_s))
        # An unproven reading counts at its SLO: at target, no breach.
        names = {name for name, _, _ in unproven}
        itl_ratio = 1.0 if "ITL" in names else itl_ratio
        ttft_ratio = 1.0 if "TTFT" in names else ttft_ratio
    return Signals(
        ready_replicas=observation.ready_replicas,
        starting_replicas=max(0, observation.spec_replicas - observation.ready_replicas),
        num_pods_scraped=scraped,
        queue_per_replica=queue_per_replica,
        queue_ratio=queue_ratio,
        queue_spike_ratio=spike_ratio,
        itl_p99_s=itl_p99_s,
        itl_ratio=itl_ratio,
        ttft_p99_s=ttft_p99_s,
        ttft_ratio=ttft_ratio,
        kv_cache_usage=observation.kv_cache_usage,
        unproven=tuple(unproven),
    )


def _unproven(quantile: LatencyQuantile | None, slo_s: float | None) -> bool:
    """Whether `quantile` reads over `slo_s` only by interpolation inside a bucket that holds
    the SLO."""
    if quantile is None or slo_s is None or not quantile.valid or quantile.idle:
        return False
    return quantile.p99_s > slo_s and quantile.straddles(slo_s)


def _latency(
    quantile: LatencyQuantile | None, slo_s: float | None
) -> tuple[float | None, float | None]:
    if quantile is None or not quantile.valid:
        return None, None
    if quantile.idle:
        return None, (0.0 if slo_s is not None else None)
    return quantile.p99_s, (quantile.p99_s / slo_s if slo_s is not None else None)


def missing(policy: AutoscalePolicy, observation: Observation) -> list[str]:
    """The signals the policy needs that the observation lacks."""
    if observation.num_pods_scraped == 0:
        return [f"any of the {observation.num_pods_expected} ready pods"]
    lacking = []
    for name, value in (
        ("num_requests_waiting", observation.num_requests_waiting),
        ("num_requests_running", observation.num_requests_running),
    ):
        if value is None or not math.isfinite(value):
            lacking.append(name)
    for name, quantile, slo_s in (
        ("P99 ITL", observation.itl, policy.itl_p99_slo_s),
        ("P99 TTFT", observation.ttft, policy.ttft_p99_slo_s),
    ):
        if slo_s is not None and (quantile is None or not quantile.valid):
            lacking.append(name)
    return lacking


def dominant(signals: Signals) -> Reason:
    """The reason code of the signal furthest over its target."""
    candidates = [
        (signals.queue_ratio, Reason.queue_over_target),
        (signals.itl_ratio, Reason.itl_over_slo),
        (signals.ttft_ratio, Reason.ttft_over_slo),
    ]
    return max(
        ((ratio, code) for ratio, code in candidates if ratio is not None),
        key=lambda pair: pair[0],
    )[1]


def describe(policy: AutoscalePolicy, signals: Signals) -> str:
    """The signals and their targets in words."""
    parts = []
    if signals.queue_per_replica is not None:
        parts.append(
            f"queue {signals.queue_per_replica:.1f}/replica "
            f"(target {policy.target_queue_per_replica:g})"
        )
    for name, value, slo_s in (
        ("ITL", signals.itl_p99_s, policy.itl_p99_slo_s),
        ("TTFT", signals.ttft_p99_s, policy.ttft_p99_slo_s),
    ):
        if slo_s is None:
            continue
        # Past the blind holds every latency with an SLO was read: no P99 is an idle window.
        shown = "idle" if value is None else f"{approx(value)} s"
        doubt = "".join(
            f"; its bucket {lo:g}-{hi:g} s holds the SLO: not provably over"
            for unproven, lo, hi in signals.unproven
            if unproven == name
        )
        parts.append(f"P99 {name} {shown} (SLO {slo_s:g} s{doubt})")
    return ", ".join(parts)
