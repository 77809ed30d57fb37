"""The reconciler and the autoscaler write one status without losing each other's fields.

Each applies only what it owns under its own field manager, computed from a copy of the object
it read earlier, as the two loops do in the operator: neither may undo the other's latest write.
"""

from __future__ import annotations

import pytest
from _operator_harness import create, get_llms, sample

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.status import AUTOSCALER, RECONCILER, apply_status
from tokenpilot.api.llmservice import Condition, ConditionStatus, LLMService
from tokenpilot.core.autoscale import AutoscalePolicy, Evidence, History, decide
from tokenpilot.core.autoscale.observation import Observation
from tokenpilot.core.autoscale.report import autoscaler_status, metrics_condition
from tokenpilot.core.batching import spec_decision
from tokenpilot.core.retune import Tuning
from tokenpilot.core.status import DeploymentFacts, desired_status

pytestmark = pytest.mark.cluster
NOW = "2026-01-01T00:00:00Z"
BATCHING = spec_decision(4096, 256)
READY = DeploymentFacts(1, 1, 2, 2, 2, 2, available_replicas=2)
# The autoscaler's second condition, as core.autoscale.correction words it.
SLOWER = Condition(
    type="PaceAsProfiled",
    status=ConditionStatus.false,
    reason="SlowerThanProfile",
    message="the engines' steps take 1.3x the step model's price",
    last_transition_time=NOW,
)


def reconciler_writes(client: KubeClient, stale: LLMService, problem: str | None = None) -> None:
    status = desired_status(
        stale,
        deployment=READY,
        sku_name=None if problem else "H100-80GB",
        tuning=None if problem else Tuning.of(BATCHING),
        problem=problem,
        now=NOW,
    )
    meta = stale.metadata
    apply_status(client, meta.namespace, meta.name, status, field_manager=RECONCILER)


def autoscaler_writes(
    client: KubeClient, stale: LLMService, num_pods_scraped: int, *, slower: bool = False
) -> None:
    seen = Observation(
        spec_replicas=2,
        ready_replicas=2,
        num_pods_expected=2,
        num_pods_scraped=num_pods_scraped,
        num_requests_waiting=0.0,
        num_requests_running=4.0,
        itl=None,
        ttft=None,
        observed_at_s=0.0,
        problems=() if num_pods_scraped == 2 else ("llm-1: connection refused",),
    )
    decision = decide(
        AutoscalePolicy(min_replicas=1, max_replicas=4), History(), Evidence(seen), 0.0
    )
    condition = metrics_condition(
        stale.status.conditions, decision, problems=seen.problems, generation=1, now=NOW
    )
    owned = autoscaler_status(
        None,
        desired_replicas=2,
        mode=decision.mode,
        reason_code=decision.reason_code,
        reason=decision.reason,
        conditions=(condition, *([SLOWER] if slower else [])),
        now=NOW,
    )
    meta = stale.metadata
    apply_status(client, meta.namespace, meta.name, owned, field_manager=AUTOSCALER)


def conditions(client: KubeClient, namespace: str) -> dict[str, tuple[str, str]]:
    body = get_llms(client, namespace, "llama-8b")
    return {c["type"]: (c["status"], c["reason"]) for c in body["status"].get("conditions", [])}


def test_neither_writer_undoes_the_other(client: KubeClient, namespace: str) -> None:
    body = create(client, sample("llama-3.1-8b-h100.yaml", namespace))
    name = body["metadata"]["name"]
    stale = LLMService.model_validate(body)  # both read the object before either wrote

    autoscaler_writes(client, stale, num_pods_scraped=1)
    reconciler_writes(client, stale)
    seen = conditions(client, namespace)
    assert seen["MetricsAvailable"] == ("False", "PartialScrape")
    assert seen["Ready"] == ("True", "ReplicasReady")

    autoscaler_writes(client, stale, num_pods_scraped=2, slower=True)
    seen = conditions(client, namespace)
    assert seen["MetricsAvailable"] == ("True", "MetricsRead")
    assert seen["PaceAsProfiled"] == ("False", "SlowerThanProfile")
    assert seen["Ready"] == ("True", "ReplicasReady")  # the autoscaler's stale copy is not applied

    reconciler_writes(client, stale, problem="weights do not fit")
    status = get_llms(client, namespace, name)["status"]
    seen = conditions(client, namespace)
    assert seen["Infeasible"] == ("True", "Infeasible")
    assert seen["MetricsAvailable"] == ("True", "MetricsRead")
    assert seen["PaceAsProfiled"] == ("False", "SlowerThanProfile")
    assert "tuning" not in status  # what the reconciler stopped applying is gone
    assert status["autoscaling"]["desiredReplicas"] == 2

    autoscaler_writes(client, stale, num_pods_scraped=2)
    seen = conditions(client, namespace)
    assert "PaceAsProfiled" not in seen  # nor is what the autoscaler stopped applying
    assert seen["Infeasible"] == ("True", "Infeasible")
