"""The demo's milestones and per-phase figures from recorded samples and requests."""

from __future__ import annotations

import pytest

from tokenpilot_lab.demo.observe import Sample
from tokenpilot_lab.demo.settings import DemoSettings, service_manifest
from tokenpilot_lab.demo.summary import (
    FIRST_SCALE_UP_BOUND_S,
    itl_p99_engine_s,
    milestones,
    report,
    rolling_itl_p99_engine_s,
    steps,
    verdict,
)
from tokenpilot_lab.loadgen import LoadPhase, LoadPlan, RequestRecord


def series(replicas: list[tuple[float, int, int]]) -> list[Sample]:
    return [Sample(t, desired, ready, 0, 0, 0.01, 2048, "steady", "", ready)
            for t, desired, ready in replicas]  # fmt: skip


# (t, desired, ready); the burst runs from 10 s to 30 s, minReplicas 1.
CASES = {
    "scale-up, pods Ready, back to min": (
        [
            (0, 1, 1),
            (9, 1, 1),
            (12, 1, 1),
            (14, 3, 1),
            (20, 3, 3),
            (30, 3, 3),
            (55, 2, 2),
            (70, 1, 1),
        ],
        dict(
            first_scale_up_s=4,
            first_scale_up_to=3,
            new_pods_ready_s=10,
            back_to_min_s=40,
            peak_desired_replicas=3,
            peak_ready_replicas=3,
        ),
    ),
    "never scaled": (
        [(0, 1, 1), (15, 1, 1), (40, 1, 1)],
        dict(first_scale_up_s=None, new_pods_ready_s=None, back_to_min_s=10),
    ),
    "scaled but pods never Ready and never back": (
        [(0, 1, 1), (11, 2, 1), (40, 2, 1)],
        dict(first_scale_up_s=1, new_pods_ready_s=None, back_to_min_s=None),
    ),
    "desired back at min while the extra pod still terminates": (
        [(0, 1, 1), (11, 2, 1), (15, 2, 2), (35, 1, 2), (36, 1, 1)],
        dict(back_to_min_s=6),
    ),
}


@pytest.mark.parametrize(("rows", "expected"), CASES.values(), ids=CASES.keys())
def test_milestones(rows: list[tuple[float, int, int]], expected: dict[str, object]) -> None:
    m = milestones(series(rows), burst_start_s=10.0, burst_end_s=30.0, min_replicas=1)
    assert m.replicas_at_start == 1
    for name, value in expected.items():
        assert getattr(m, name) == value, name


def record(phase: str, sent_at_s: float, gaps_s: list[float], ttft_s: float = 0.1) -> RequestRecord:
    return RequestRecord(phase, "http://127.0.0.1:1", sent_at_s, ttft_s, gaps_s, len(gaps_s) + 1,
                         sent_at_s + ttft_s + sum(gaps_s))  # fmt: skip


def test_itl_is_reported_per_phase_in_engine_seconds() -> None:
    records = [record("quiet", 1.0, [0.1] * 100), record("burst", 11.0, [0.1] * 98 + [0.5] * 2)]
    # Measured at a time scale of 0.1: 100 ms of wall clock is 10 ms on the simulated GPU.
    assert itl_p99_engine_s(records, 0.0, 10.0, 0.1) == pytest.approx(0.010)
    assert itl_p99_engine_s(records, 10.0, 30.0, 0.1) == pytest.approx(0.050)
    assert itl_p99_engine_s(records, 30.0, 40.0, 0.1) is None


def test_rolling_itl_places_each_gap_when_its_token_arrived() -> None:
    # Sent at 0, first token at 1 s, then one a second: the gaps end at 2, 3, 4 and 5 s, so
    # they fall in the 2-second bins [2, 4) and [4, 6).
    rows = rolling_itl_p99_engine_s([record("quiet", 0.0, [1.0] * 4, ttft_s=1.0)], 2.0, 10.0, 1.0)
    assert [t for t, _ in rows] == [3.0, 5.0]
    assert all(p99 == 1.0 for _, p99 in rows)


def test_report_names_every_figure_the_demo_promises() -> None:
    plan = LoadPlan(
        phases=(LoadPhase("quiet", 10, 1), LoadPhase("burst", 20, 5), LoadPhase("cool-down", 30, 1))
    )
    samples = series([(0, 1, 1), (14, 3, 1), (20, 3, 3), (70, 1, 1)])
    out = report(samples=samples, records=[record("quiet", 1.0, [0.1] * 10)], plan=plan,
                 time_scale=0.1, min_replicas=1, scale_down_stabilization_s=20.0,
                 itl_p99_slo_s=0.05, elapsed_s=100.0, png="out/demo-timeline.png")  # fmt: skip
    assert out["replicasAtStart"] == 1 and out["replicasAtPeak"] == 3
    assert out["firstScaleUpS"] == 4.0 and out["newPodsReadyS"] == 10.0
    assert out["backToMinReplicasAfterBurstS"] == 40.0
    assert out["itlP99BeforeMs"] == 10.0 and out["itlP99DuringMs"] is None
    assert out["png"] == "out/demo-timeline.png"


def test_the_demo_service_is_a_valid_llmservice_with_a_short_scale_down_window() -> None:
    from tokenpilot.api.llmservice import LLMService
    from tokenpilot.core.autoscale.spec import policy_from_spec

    settings = DemoSettings()
    service = LLMService.model_validate(service_manifest(settings))
    policy = policy_from_spec(service.spec)
    assert policy.scale_down_stabilization_s == settings.scale_down_stabilization_s
    assert policy.itl_p99_slo_s == settings.itl_p99_slo_s
    assert (policy.min_replicas, policy.max_replicas) == (1, 4)
    assert service.spec.engine.extra_args == ["--time-scale", "0.1", "--rates-in-engine-time"]


def coded(rows: list[tuple[float, int, int, str, int | None]]) -> list[Sample]:
    """(t, desired, ready, reason code, status.autoscaling.desiredReplicas) per sample."""
    return [Sample(t, desired, ready, 0, 0, 0.01, 2048, "steady", "", ready, code,
                   decided_replicas=decided)
            for t, desired, ready, code, decided in rows]  # fmt: skip


def test_each_step_carries_the_code_of_the_decision_that_asked_for_it() -> None:
    # At 14 s spec.replicas reads 3 while status still shows the previous decision (1,
    # WithinTargets): the step's code is the one status shows once it says 3.
    samples = coded([
        (0, 1, 1, "WithinTargets", 1),
        (14, 3, 1, "WithinTargets", 1),
        (15, 3, 1, "QueueOverTarget", 3),
        (40, 2, 3, "ModelHeadroom", 2),
    ])  # fmt: skip
    assert [(s.t_s, s.before, s.after, s.code) for s in steps(samples)] == [
        (14, 1, 3, "QueueOverTarget"),
        (40, 3, 2, "ModelHeadroom"),
    ]


VERDICTS = {
    "the story held": ([(0, 1, 1), (14, 3, 1), (20, 3, 3), (55, 1, 1)], None),
    "scaled up in the quiet phase": (
        [(0, 1, 1), (5, 2, 1), (14, 3, 2), (20, 3, 3), (55, 1, 1)],
        "2 replicas when the burst started, not 1: the fleet scaled up in the quiet phase",
    ),
    "first scale-up later than the bound": (
        [(0, 1, 1), (26, 3, 1), (29, 3, 3), (55, 1, 1)],
        f"the first scale-up came 16.0 s after the burst started, over the "
        f"{FIRST_SCALE_UP_BOUND_S:g} s bound",
    ),
    "new pods never Ready": (
        [(0, 1, 1), (14, 3, 1), (29, 2, 1), (55, 1, 1)],
        "the new pods never became Ready",
    ),
    "a step down during the burst": (
        [(0, 1, 1), (14, 3, 1), (20, 3, 3), (25, 2, 3), (55, 1, 1)],
        "the fleet stepped down during the burst (3 -> 2 at 15 s, no reason code)",
    ),
}


@pytest.mark.parametrize(("rows", "why"), VERDICTS.values(), ids=VERDICTS.keys())
def test_ok_is_false_with_one_line_why_when_the_story_fails(
    rows: list[tuple[float, int, int]], why: str | None
) -> None:
    samples = series(rows)
    m = milestones(samples, burst_start_s=10.0, burst_end_s=30.0, min_replicas=1)
    assert verdict(samples, m, burst_start_s=10.0, burst_end_s=30.0, min_replicas=1) == why
    plan = LoadPlan(
        phases=(LoadPhase("quiet", 10, 1), LoadPhase("burst", 20, 5), LoadPhase("cool-down", 30, 1))
    )
    out = report(samples=samples, records=[], plan=plan, time_scale=0.1, min_replicas=1,
                 scale_down_stabilization_s=20.0, itl_p99_slo_s=0.05, elapsed_s=1.0,
                 png=None)  # fmt: skip
    assert out["ok"] is (why is None) and out.get("why") == why
    assert out["firstScaleUpBoundS"] == FIRST_SCALE_UP_BOUND_S
