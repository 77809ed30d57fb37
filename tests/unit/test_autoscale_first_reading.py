"""A new service's first reading: a P99 needs two, so its absence is not yet a Warning."""

from __future__ import annotations

from tokenpilot.core.autoscale import AutoscalePolicy, Observation
from tokenpilot.core.autoscale.decision import Reason
from tokenpilot.core.autoscale.loop import PostEvent, ServiceState, step
from tokenpilot.core.autoscale.observation import Current, Now

POLICY = AutoscalePolicy(min_replicas=1, max_replicas=4, itl_p99_slo_s=0.05)


def windowed_without_p99(at_s: float) -> Observation:
    """What a Prometheus server answers before its rate() has two samples: the pod is read,
    its gauges are there, its ITL P99 is not."""
    return Observation(
        observed_at_s=at_s,
        spec_replicas=1,
        ready_replicas=1,
        num_pods_expected=1,
        num_pods_scraped=1,
        num_requests_waiting=0.0,
        num_requests_running=0.0,
        itl=None,
        ttft=None,
        problems=("no ITL histogram rate yet",),
    )


def warnings(actions: tuple[object, ...]) -> list[str]:
    return [a.event.reason for a in actions if isinstance(a, PostEvent) and a.event.warning]


def test_a_windowed_source_missing_the_p99_warns_only_from_the_second_reading():
    state = ServiceState(POLICY)
    current = Current(spec_replicas=1, ready_replicas=1)
    state, first, actions = step(state, windowed_without_p99(0.0), current, Now(0.0, "t0"))
    assert first.reason_code is Reason.awaiting_second_scrape
    assert warnings(actions) == []
    state, second, actions = step(state, windowed_without_p99(5.0), current, Now(5.0, "t1"))
    assert second.reason_code is Reason.missing_metrics
    assert warnings(actions) == ["MissingMetrics"]
