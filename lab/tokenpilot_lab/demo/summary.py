"""The demo's figures from its samples and request records: pure arithmetic, no I/O.

Client-side latencies are measured in wall seconds and reported in engine seconds (times the
engine's time scale), the unit of the SLO and of the engines' own metrics.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot_lab.demo.observe import Sample
from tokenpilot_lab.loadgen import LoadPlan, RequestRecord, percentile


@dataclass(frozen=True)
class Milestones:
    replicas_at_start: int
    peak_desired_replicas: int
    peak_ready_replicas: int
    first_scale_up_s: float | None  # seconds after the burst started
    first_scale_up_to: int | None
    new_pods_ready_s: float | None  # seconds after the burst started
    back_to_min_s: float | None  # seconds after the burst ended


def milestones(
    samples: Sequence[Sample], burst_start_s: float, burst_end_s: float, min_replicas: int
) -> Milestones:
    before = [s for s in samples if s.t_s < burst_start_s] or list(samples[:1])
    start = before[-1].desired_replicas if before else 0
    scale_up = next(
        (s for s in samples if s.t_s >= burst_start_s and s.desired_replicas > start), None
    )
    ready = None
    if scale_up is not None:
        ready = next(
            (
                s
                for s in samples
                if s.t_s >= scale_up.t_s and s.ready_replicas >= scale_up.desired_replicas
            ),
            None,
        )
    back = next(
        (
            s
            for s in samples
            if s.t_s >= burst_end_s
            and s.desired_replicas <= min_replicas
            and s.ready_replicas <= min_replicas
        ),
        None,
    )
    return Milestones(
        replicas_at_start=start,
        peak_desired_replicas=max((s.desired_replicas for s in samples), default=0),
        peak_ready_replicas=max((s.ready_replicas for s in samples), default=0),
        first_scale_up_s=None if scale_up is None else scale_up.t_s - burst_start_s,
        first_scale_up_to=None if scale_up is None else scale_up.desired_replicas,
        new_pods_ready_s=None if ready is None else ready.t_s - burst_start_s,
        back_to_min_s=None if back is None else back.t_s - burst_end_s,
    )


@dataclass(frozen=True)
class Step:
    """A change of the desired replicas at `t_s`, and the reason code of the decision that
    asked for it ("" when no sample shows that decision)."""

    t_s: float
    before: int
    after: int
    code: str


def steps(samples: Sequence[Sample]) -> list[Step]:
    """Every change of spec.replicas in `samples`, each with its decision's reason code.

    A change is first seen in the sample that reads the new spec.replicas; the decision that
    asked for it is the first sample from there on whose status.autoscaling.desiredReplicas is
    the new value (the operator writes the scale before the status, so the two may be a sample
    apart), looked for while spec.replicas stays there. Samples without desiredReplicas fall
    back to their own reason code."""
    out = []
    for i, (before, after) in enumerate(itertools.pairwise(samples), start=1):
        to = after.desired_replicas
        if to == before.desired_replicas:
            continue
        code = ""
        for s in samples[i:]:
            if s.desired_replicas != to:
                break
            if s.decided_replicas is None or s.decided_replicas == to:
                code = s.reason_code
                break
        out.append(Step(after.t_s, before.desired_replicas, to, code))
    return out


# The story the demo tells, as bounds: the burst meets the minimum fleet, the first scale-up
# comes within this many seconds of the burst's start (two 5 s evaluations that see the queue,
# and a scrape's slack), the new pods become Ready, no replica is given back while the burst
# runs, and the fleet is back at the minimum before the cool-down ends.
FIRST_SCALE_UP_BOUND_S = 15.0


def verdict(
    samples: Sequence[Sample],
    m: Milestones,
    *,
    burst_start_s: float,
    burst_end_s: float,
    min_replicas: int,
) -> str | None:
    """Why the run does not tell the demo's story, in one line, or None when it does."""
    if m.replicas_at_start != min_replicas:
        return (
            f"{m.replicas_at_start} replicas when the burst started, not {min_replicas}: the "
            "fleet scaled up in the quiet phase"
        )
    if m.first_scale_up_s is None:
        return "no scale-up after the burst started"
    if m.first_scale_up_s > FIRST_SCALE_UP_BOUND_S:
        return (
            f"the first scale-up came {m.first_scale_up_s:.1f} s after the burst started, over "
            f"the {FIRST_SCALE_UP_BOUND_S:g} s bound"
        )
    if m.new_pods_ready_s is None:
        return "the new pods never became Ready"
    for step in steps(samples):
        if burst_start_s <= step.t_s < burst_end_s and step.after < step.before:
            return (
                f"the fleet stepped down during the burst ({step.before} -> {step.after} at "
                f"{step.t_s - burst_start_s:.0f} s, {step.code or 'no reason code'})"
            )
    if m.back_to_min_s is None:
        return f"not back at {min_replicas} replicas before the cool-down ended"
    return None


def itl_p99_engine_s(
    records: Sequence[RequestRecord], start_s: float, end_s: float, time_scale: float
) -> float | None:
    """P99 of the token gaps of requests sent in [start_s, end_s), in engine seconds."""
    gaps = [g for r in records if start_s <= r.sent_at_s < end_s for g in r.itl_s]
    p99 = percentile(gaps, 0.99)
    return None if p99 is None else p99 * time_scale


def ttft_p99_engine_s(
    records: Sequence[RequestRecord], start_s: float, end_s: float, time_scale: float
) -> float | None:
    """P99 time to first token of requests sent in [start_s, end_s), in engine seconds."""
    ttfts = [r.ttft_s for r in records if start_s <= r.sent_at_s < end_s and r.ttft_s is not None]
    p99 = percentile(ttfts, 0.99)
    return None if p99 is None else p99 * time_scale


def rolling_itl_p99_engine_s(
    records: Sequence[RequestRecord], bin_s: float, until_s: float, time_scale: float
) -> list[tuple[float, float]]:
    """(bin middle, P99 of the token gaps that arrived in the bin) in engine seconds.

    Gaps are placed at the time their request was sent plus its TTFT plus the gaps before
    them, which is when the client received the token.
    """
    bins: dict[int, list[float]] = {}
    for record in records:
        if record.ttft_s is None:
            continue
        t_s = record.sent_at_s + record.ttft_s
        for gap in record.itl_s:
            t_s += gap
            bins.setdefault(int(t_s // bin_s), []).append(gap)
    out = []
    for index in sorted(bins):
        middle = (index + 0.5) * bin_s
        p99 = percentile(bins[index], 0.99)
        if middle <= until_s and p99 is not None:
            out.append((middle, p99 * time_scale))
    return out


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def report(
    *,
    samples: Sequence[Sample],
    records: Sequence[RequestRecord],
    plan: LoadPlan,
    time_scale: float,
    min_replicas: int,
    scale_down_stabilization_s: float,
    itl_p99_slo_s: float,
    elapsed_s: float,
    png: str | None,
) -> dict[str, Any]:
    """The demo's final JSON object: `ok` and, when it is false, `why` in one line first."""
    burst_start_s = plan.phase_start_s("burst")
    burst_end_s = plan.phase_start_s("cool-down")
    m = milestones(samples, burst_start_s, burst_end_s, min_replicas)
    end_s = max((r.sent_at_s for r in records), default=burst_end_s) + 1
    errors = [r for r in records if r.error is not None]
    why = verdict(
        samples, m, burst_start_s=burst_start_s, burst_end_s=burst_end_s, min_replicas=min_replicas
    )
    return {
        "ok": why is None,
        **({} if why is None else {"why": why}),
        "replicasAtStart": m.replicas_at_start,
        "replicasAtPeak": m.peak_desired_replicas,
        "readyReplicasAtPeak": m.peak_ready_replicas,
        "firstScaleUpS": _round(m.first_scale_up_s, 1),
        "firstScaleUpTo": m.first_scale_up_to,
        "firstScaleUpBoundS": FIRST_SCALE_UP_BOUND_S,
        "newPodsReadyS": _round(m.new_pods_ready_s, 1),
        "backToMinReplicasAfterBurstS": _round(m.back_to_min_s, 1),
        "scaleDownStabilizationS": scale_down_stabilization_s,
        "itlP99SloMs": _ms(itl_p99_slo_s),
        "itlP99BeforeMs": _ms(itl_p99_engine_s(records, 0.0, burst_start_s, time_scale)),
        "itlP99DuringMs": _ms(itl_p99_engine_s(records, burst_start_s, burst_end_s, time_scale)),
        "itlP99AfterMs": _ms(itl_p99_engine_s(records, burst_end_s, end_s, time_scale)),
        "ttftP99BeforeS": _round(ttft_p99_engine_s(records, 0.0, burst_start_s, time_scale), 3),
        "ttftP99DuringS": _round(
            ttft_p99_engine_s(records, burst_start_s, burst_end_s, time_scale), 3
        ),
        "ttftP99AfterS": _round(ttft_p99_engine_s(records, burst_end_s, end_s, time_scale), 3),
        "timeScale": time_scale,
        "requests": len(records),
        "requestErrors": len(errors),
        "elapsedS": round(elapsed_s, 1),
        "png": png,
        # Whether the engines ran at the pace their GPU profile prices (the last reading).
        "enginePace": next((s.pace for s in reversed(samples) if s.pace), None),
    }
