"""No step down inside the scale-down window after the fleet was found short: the replicas a
breach asked for are kept a whole window, Ready or still starting, whatever the forecast says
in between. Without it a burst met by the queue scaled up and, one evaluation later, the
forecast gave a replica back that had not yet started (the demo's 2 -> 4 -> 3 in five seconds).
"""

from __future__ import annotations

from dataclasses import replace

from _evidence import sized
from autoscale_fleet import TTFT_POLICY, TTFT_REPLICA_MODEL, light_load
from test_autoscale_model_warmup import outlook_over

from tokenpilot.core.autoscale import History, Mode, Observation, Reason, decide

POLICY = replace(TTFT_POLICY, replica_model=TTFT_REPLICA_MODEL)  # 60 s scale-down window
WINDOW_S = POLICY.scale_down_stabilization_s


def crowded(at_s: float, ready: int) -> Observation:
    """`ready` pods, each with 10 requests waiting beside 16 running: a queue over its target."""
    return replace(
        light_load(at_s, ready),
        num_requests_waiting=10.0 * ready,
        num_requests_running=16.0 * ready,
    )


def test_a_step_up_is_not_given_back_inside_the_window() -> None:
    # At 115 s a queue twice confirmed over target scales 8 ready replicas up; 5 s later the
    # queue has cleared on the 8 (the new replicas still start) and the forecast, which has
    # seen two windows of lighter load, says fewer would do. The step up stands for the window.
    outlook = outlook_over(120.0)
    up = decide(
        POLICY,
        History(last_queue_per_replica=10.0),
        sized(POLICY, crowded(115.0, 8), outlook, 115.0),
        115.0,
    )
    assert up.mode in (Mode.scale_up, Mode.panic) and up.desired_replicas > 8
    after = replace(light_load(120.0, 8), spec_replicas=up.desired_replicas)
    kept = decide(POLICY, up.history, sized(POLICY, after, outlook, 120.0), 120.0)
    assert kept.desired_replicas == up.desired_replicas, kept.reason
    assert kept.reason_code is Reason.stabilizing
    assert f"no step down inside the {WINDOW_S:g} s scale-down window" in kept.reason


def test_a_replica_asked_for_in_a_breach_is_kept_for_the_window() -> None:
    # The forecast has seen two windows and says fewer replicas would do, but a breach found
    # the fleet short 5 s ago (the fleet grew then; its new replicas may still be starting).
    now_s = 120.0
    short = History(last_short_s=now_s - 5.0)
    kept = decide(
        POLICY, short, sized(POLICY, light_load(now_s), outlook_over(now_s), now_s), now_s
    )
    assert kept.mode is Mode.steady
    assert kept.reason_code is Reason.stabilizing
    assert kept.desired_replicas == light_load(now_s).spec_replicas
    assert f"no step down inside the {WINDOW_S:g} s scale-down window" in kept.reason


def test_once_the_window_has_passed_the_forecast_may_step_down() -> None:
    now_s = 120.0
    history = History(last_short_s=now_s - WINDOW_S)
    moved = decide(
        POLICY, history, sized(POLICY, light_load(now_s), outlook_over(now_s), now_s), now_s
    )
    assert moved.mode is Mode.scale_down
    assert moved.reason_code is Reason.model_headroom


def test_a_breach_marks_the_fleet_short_whether_it_moves_or_waits() -> None:
    # A breach with starting replicas that already cover the need waits for them; it still
    # found the fleet short, so the window starts again.
    from test_autoscale_prefill import reading

    waiting = reading(4, running=40, waiting=40, ttft_p99_s=0.5, at_s=50.0)
    starting = replace(waiting, ready_replicas=2, num_pods_expected=2, num_pods_scraped=2)
    decision = decide(
        TTFT_POLICY,
        History(last_queue_per_replica=20.0),
        sized(TTFT_POLICY, starting, None, 50.0),
        50.0,
    )
    assert decision.history.last_short_s == 50.0
