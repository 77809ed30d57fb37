"""The Events a user reads in `kubectl describe llms`, and the status the autoscaler writes."""

from __future__ import annotations

from typing import Any

from _llms import service

from tokenpilot.core.autoscale import Decision, History, Mode, Reason, Signals
from tokenpilot.core.autoscale.report import autoscaler_status, scale_event
from tokenpilot.core.batching import spec_decision
from tokenpilot.core.events import reconcile_events
from tokenpilot.core.pod_health import PodFailure
from tokenpilot.core.retune import Tuning
from tokenpilot.core.service_event import ServiceEvent
from tokenpilot.core.status import DeploymentFacts, desired_status

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
READY = DeploymentFacts(1, 1, 2, 2, 2, 2, available_replicas=2)


def status(problem: str | None = None, budget: int = 2048) -> dict[str, Any]:
    return desired_status(
        service(),
        deployment=READY,
        sku_name=None if problem else "L40S",
        tuning=None if problem else Tuning.of(spec_decision(budget, 64)),
        problem=problem,
        now=T0,
    )


def decision(desired: int, code: Reason, mode: Mode = Mode.steady) -> Decision:
    return Decision(desired, mode, code, f"because {code.value}", Signals(2, 0, 2), History())


def test_a_new_service_gets_one_applied_event_carrying_its_tuning_and_a_phase_event() -> None:
    events = reconcile_events("create", ["Deployment chat (created)"], {}, status())
    assert [e.reason for e in events] == ["Applied", "PhaseReady"]
    assert events[0].message == (
        "create: applied Deployment chat (created); tuned L40S: maxNumBatchedTokens 2048, "
        "maxNumSeqs 64 (Spec, set by Spec): maxNumBatchedTokens is set in the spec"
    )


def test_a_new_budget_alone_is_a_tuned_event() -> None:
    events = reconcile_events("update", [], status(budget=2048), status(budget=4096))
    assert [(e.reason, e.warning) for e in events] == [("Tuned", False)]
    assert "maxNumBatchedTokens 4096" in events[0].message


def test_drift_and_an_infeasible_spec() -> None:
    drift = reconcile_events("resync", ["Service chat (spec.ports)"], status(), status())
    assert [e.reason for e in drift] == ["DriftCorrected"]
    broken = reconcile_events("update", [], status(), status("weights do not fit"))
    assert broken == [
        ServiceEvent("PhaseInfeasible", "phase Ready -> Infeasible: weights do not fit", True)
    ]


def test_an_idle_pass_tells_nothing() -> None:
    assert reconcile_events("resync", [], status(), status()) == []


def test_scale_events_when_replicas_move_or_the_autoscaler_goes_blind() -> None:
    up = scale_event(2, decision(3, Reason.queue_over_target, Mode.scale_up), "WithinTargets")
    assert up == ServiceEvent("QueueOverTarget", "2 -> 3: because QueueOverTarget")
    assert scale_event(2, decision(2, Reason.within_targets), "WithinTargets") is None
    blind = scale_event(2, decision(2, Reason.stale_metrics, Mode.hold), "WithinTargets")
    assert blind is not None and blind.warning
    # Still blind for the same reason: said once.
    assert scale_event(2, decision(2, Reason.stale_metrics, Mode.hold), "StaleMetrics") is None


def test_the_autoscaler_status_says_the_latest_words_and_when_the_outcome_changed() -> None:
    first = autoscaler_status(
        None,
        desired_replicas=2,
        mode=Mode.steady,
        reason_code=Reason.within_targets,
        reason="queue 0.5 per replica",
        conditions=(),
        now=T0,
    )
    assert first == {
        "autoscaling": {
            "desiredReplicas": 2,
            "mode": "steady",
            "reasonCode": "WithinTargets",
            "reason": "queue 0.5 per replica",
            "lastDecisionTime": T0,
        }
    }
    # Other figures in the words, same outcome: the latest words, the decision's time kept
    # (the demo once showed a drained queue's "44.0/replica" for 40 s).
    again = autoscaler_status(
        first,
        desired_replicas=2,
        mode=Mode.steady,
        reason_code=Reason.within_targets,
        reason="queue 0.7 per replica",
        conditions=(),
        now=T1,
    )
    assert again["autoscaling"]["reason"] == "queue 0.7 per replica"
    assert again["autoscaling"]["lastDecisionTime"] == T0
    # The same evaluation twice: the same JSON, so nothing is written.
    assert (
        autoscaler_status(
            again,
            desired_replicas=2,
            mode=Mode.steady,
            reason_code=Reason.within_targets,
            reason="queue 0.7 per replica",
            conditions=(),
            now=T1,
        )
        == again
    )
    moved = autoscaler_status(
        first,
        desired_replicas=3,
        mode=Mode.scale_up,
        reason_code=Reason.queue_over_target,
        reason="queue 6 per replica",
        conditions=(),
        now=T1,
    )
    assert moved["autoscaling"]["lastDecisionTime"] == T1


def degraded(reason: str, message: str) -> dict[str, Any]:
    failures = [PodFailure(reason, "p", message)]
    rolling = DeploymentFacts(1, 1, 2, 2, 1, 1, available_replicas=1)
    return desired_status(
        service(),
        deployment=rolling,
        sku_name="L40S",
        tuning=Tuning.of(spec_decision(2048, 64)),
        problem=None,
        now=T0,
        pod_failures=failures,
        num_pods=2,
    )


def test_a_failure_is_one_event_per_transition_not_per_pass() -> None:
    crash = degraded("CrashLoopBackOff", "exit code 2: bad flag")
    first = reconcile_events("pod", [], status(), crash)
    assert [(e.reason, e.warning) for e in first] == [("PhaseDegraded", True)]
    assert "CrashLoopBackOff" in first[0].message
    # The same failure seen again, even with other words: nothing new to tell.
    again = degraded("CrashLoopBackOff", "exit code 2: bad flag at line 3")
    assert reconcile_events("resync", [], crash, again) == []
    # A new way of failing is a new transition.
    oom = reconcile_events("pod", [], crash, degraded("OOMKilled", ""))
    assert [(e.reason, e.warning) for e in oom] == [("OOMKilled", True)]


def test_an_infeasible_event_carries_the_longer_reasons() -> None:
    events = reconcile_events(
        "update", [], status(), status("no GPU fits"), detail="nodes offer: L40S (1 node(s))"
    )
    assert events[0].message.endswith("no GPU fits (nodes offer: L40S (1 node(s)))")
