"""MetricsAvailable: what a user reading the LLMService's conditions learns from the autoscaler."""

from __future__ import annotations

from dataclasses import replace

import pytest
from autoscale_fleet import ITL_SLO_S, itl_quantile

from tokenpilot.api.llmservice import ConditionStatus
from tokenpilot.core import conditions as cond
from tokenpilot.core.autoscale import AutoscalePolicy, Evidence, History, Observation, decide
from tokenpilot.core.autoscale.report import metrics_condition

POLICY = AutoscalePolicy(min_replicas=1, max_replicas=4, itl_p99_slo_s=ITL_SLO_S)
GARBAGE = "pod llm-0: /metrics is not Prometheus text (line 1)"


def seen(**changes: object) -> Observation:
    base = Observation(
        observed_at_s=100.0,
        spec_replicas=2,
        ready_replicas=2,
        num_pods_expected=2,
        num_pods_scraped=2,
        num_requests_waiting=0.0,
        num_requests_running=4.0,
        itl=itl_quantile(0.02),
        ttft=None,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("observation", "status", "reason", "in_message"),
    [
        (seen(), ConditionStatus.true, "MetricsRead", "every ready engine pod"),
        (
            seen(
                num_pods_scraped=0,
                num_requests_waiting=None,
                num_requests_running=None,
                itl=None,
                problems=(GARBAGE,),
            ),
            ConditionStatus.false,
            "MissingMetrics",
            GARBAGE,
        ),
        (seen(observed_at_s=50.0), ConditionStatus.false, "StaleMetrics", "too old"),
        (
            seen(num_pods_scraped=1, problems=("pod llm-1: connection refused",)),
            ConditionStatus.false,
            "PartialScrape",
            "connection refused",
        ),
        (
            seen(ready_replicas=0, num_pods_expected=0, num_pods_scraped=0),
            ConditionStatus.unknown,
            "NoReadyPods",
            "no engine pod",
        ),
    ],
)
def test_condition_says_why_the_autoscaler_cannot_see(observation, status, reason, in_message):
    decision = decide(POLICY, History(), Evidence(observation), 100.0)
    found = metrics_condition(
        [], decision, problems=observation.problems, generation=7, now="2026-01-01T00:00:00Z"
    )
    assert found.type == cond.METRICS_AVAILABLE
    assert (found.status, found.reason, found.observed_generation) == (status, reason, 7)
    assert in_message in found.message
    if status is not ConditionStatus.true:
        # the replicas are held, and the condition says so
        assert decision.desired_replicas == 2 and "replicas held at 2" in found.message


def test_steady_evaluations_leave_the_condition_identical():
    first = metrics_condition(
        [], decide(POLICY, History(), Evidence(seen()), 100.0), problems=(), generation=1, now="t1"
    )
    busier = seen(num_requests_running=9.0, itl=itl_quantile(0.03))
    again = metrics_condition(
        [first],
        decide(POLICY, History(), Evidence(busier), 100.0),
        problems=(),
        generation=1,
        now="t2",
    )
    assert again == first  # no status write for a service whose metrics stay readable
