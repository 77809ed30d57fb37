"""Conditions keep their transition time unless they flip; status follows the Deployment."""

from __future__ import annotations

import pytest
from _llms import service

from tokenpilot.api.llmservice import ConditionStatus, LLMService, LLMServiceStatus
from tokenpilot.core import conditions as cond
from tokenpilot.core.batching import spec_decision
from tokenpilot.core.retune import Tuning
from tokenpilot.core.status import DeploymentFacts, desired_status, owned_status

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
BATCHING = spec_decision(8192, 1024)


def test_transition_time_kept_unless_flipped() -> None:
    one = cond.set_condition(
        [],
        type_="Ready",
        status=ConditionStatus.false,
        reason="A",
        message="a",
        observed_generation=1,
        now=T0,
    )
    same = cond.set_condition(
        one,
        type_="Ready",
        status=ConditionStatus.false,
        reason="B",
        message="b",
        observed_generation=2,
        now=T1,
    )
    flipped = cond.set_condition(
        same,
        type_="Ready",
        status=ConditionStatus.true,
        reason="C",
        message="c",
        observed_generation=2,
        now=T1,
    )
    assert same[0].last_transition_time == T0 and same[0].reason == "B"
    assert flipped[0].last_transition_time == T1


def facts(
    ready: int,
    desired: int = 2,
    updated: int | None = None,
    stalled: bool = False,
    observed: int = 4,
    replicas: int | None = None,
    available: int | None = None,
) -> DeploymentFacts:
    return DeploymentFacts(
        generation=4,
        observed_generation=observed,
        desired_replicas=desired,
        replicas=desired if replicas is None else replicas,
        ready_replicas=ready,
        updated_replicas=desired if updated is None else updated,
        available_replicas=ready if available is None else available,
        progress_deadline_exceeded=stalled,
    )


@pytest.mark.parametrize(
    ("deployment", "problem", "phase"),
    [
        (None, None, "Pending"),
        (facts(0), None, "Progressing"),
        (facts(2, updated=1), None, "Progressing"),
        (facts(2, observed=3), None, "Progressing"),
        (facts(2), None, "Ready"),
        # The old pod is the ready one: `kubectl rollout status` is still waiting.
        (facts(2, replicas=3), None, "Progressing"),
        (facts(2, available=1), None, "Progressing"),
        (facts(1, stalled=True), None, "Degraded"),
        (None, "weights do not fit", "Infeasible"),
    ],
)
def test_phase(deployment: DeploymentFacts | None, problem: str | None, phase: str) -> None:
    status = desired_status(
        service(),
        deployment=deployment,
        sku_name="H100-80GB",
        tuning=Tuning.of(BATCHING),
        problem=problem,
        now=T0,
    )
    assert status["phase"] == phase
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types["Ready"] == ("True" if phase == "Ready" else "False")
    assert types["Infeasible"] == ("True" if phase == "Infeasible" else "False")
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])


def with_status(svc: LLMService, status: dict) -> LLMService:  # type: ignore[type-arg]
    return svc.model_copy(update={"status": LLMServiceStatus.model_validate(status)})


def test_second_pass_changes_nothing() -> None:
    first = desired_status(
        service(),
        deployment=facts(2),
        sku_name="H100-80GB",
        tuning=Tuning.of(BATCHING),
        problem=None,
        now=T0,
    )
    svc = with_status(service(), first)
    again = desired_status(
        svc,
        deployment=facts(2),
        sku_name="H100-80GB",
        tuning=Tuning.of(BATCHING),
        problem=None,
        now=T1,
    )
    assert again == first == owned_status(svc)
    changed = desired_status(
        svc,
        deployment=facts(1),
        sku_name="H100-80GB",
        tuning=Tuning.of(BATCHING),
        problem=None,
        now=T1,
    )
    assert changed != owned_status(svc)


def test_status_shows_tuning_selector_endpoint() -> None:
    status = desired_status(
        service(),
        deployment=facts(2),
        sku_name="L40S",
        tuning=Tuning.of(BATCHING),
        problem=None,
        now=T0,
    )
    assert status["tuning"]["maxNumBatchedTokens"] == 8192
    assert status["tuning"]["source"] == "Spec"
    assert status["tuning"]["setBy"] == {"kind": "Spec", "tokens": 8192}
    assert status["selector"] == "serving.tokenpilot.dev/llmservice=chat"
    assert status["endpoint"] == "http://chat.ml.svc:8000/v1"
    assert "autoscaling" not in status
