"""The fleet simulator end to end on small generated traces: sanity that cannot be tuned around.

Engines are priced by a plain linear step timer (a real `StepTimer`, synthetic figures), so the
properties hold for the mechanics of the fleet, not for one GPU calibration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pytest
from _steps import LinearStep

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot.core.vllm_metrics import TOKEN_LATENCY_BUCKETS_S
from tokenpilot_lab.fleet import FleetConfig, FleetView, simulate
from tokenpilot_lab.fleet.compare import POLICY_NAMES, contenders, run_contenders
from tokenpilot_lab.fleet.policies import ScaleChoice, StaticPolicy
from tokenpilot_lab.fleet.sizing import size_for_opening, size_for_peak
from tokenpilot_lab.sim import EngineConfig
from tokenpilot_lab.workload import Trace, TraceRequest, poisson

TIMER = LinearStep()
ENGINE = EngineConfig(num_kv_blocks=20_000, max_num_batched_tokens=2048, max_num_seqs=256)
TUNED = replace(ENGINE, max_num_batched_tokens=512)
FLEET = FleetConfig(max_replicas=16, cold_start_s=60.0, usd_per_gpu_hour=2.0)


def run_all(trace: Trace, fleet: FleetConfig = FLEET) -> dict[str, float | int]:
    entries, _ = contenders(
        POLICY_NAMES,
        trace,
        fleet,
        tuned_engine=TUNED,
        default_engine=ENGINE,
        timer=TIMER,
        model_timer=TIMER,
    )
    return {r.policy: r for r in run_contenders(trace, entries, TIMER)}  # type: ignore[misc]


def merged(*traces: Trace) -> Trace:
    requests = sorted((r for t in traces for r in t.requests), key=lambda r: r.arrival_s)
    return Trace("merged", tuple(requests), max(t.duration_s for t in traces))


def test_capacity_far_above_load_every_policy_meets_every_request() -> None:
    trace = poisson(0.5, 400.0, seed=11, median_prompt_tokens=200, median_output_tokens=20)
    results = run_all(trace)
    assert set(results) == set(POLICY_NAMES)
    for name, result in results.items():
        assert result.attainment == 1.0, name  # type: ignore[attr-defined]


def test_one_replica_far_below_load_collapses() -> None:
    trace = poisson(20.0, 300.0, seed=5, median_prompt_tokens=2000, median_output_tokens=200)
    config = replace(FLEET, initial_replicas=1, max_replicas=1)
    result = simulate(trace, StaticPolicy(1), config, ENGINE, TIMER)
    assert result.attainment < 0.2
    assert result.num_met + (result.num_requests - result.num_met) == trace.num_requests


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_doubling_the_rate_never_lowers_gpu_hours_of_autoscalers(seed: int) -> None:
    # The doubled trace holds every request of the single one plus as many again.
    single = poisson(3.0, 300.0, seed=seed, median_prompt_tokens=1500, median_output_tokens=150)
    extra = poisson(
        3.0, 300.0, seed=seed + 1000, median_prompt_tokens=1500, median_output_tokens=150
    )
    double = merged(single, extra)
    base, doubled = run_all(single), run_all(double)
    for name in ("tokenpilot", "hpa", "keda", "aibrix-kpa", "vllm-default-budget"):
        assert doubled[name].gpu_hours >= base[name].gpu_hours, name  # type: ignore[attr-defined]


def test_zero_requests_cost_min_replicas_times_duration() -> None:
    fleet = replace(FLEET, min_replicas=2)
    results = run_all(Trace("empty", (), 1800.0), fleet)
    for name, result in results.items():
        assert result.gpu_hours == pytest.approx(2 * 0.5), name  # type: ignore[attr-defined]
        assert result.cost_usd == pytest.approx(2 * 0.5 * 2.0), name  # type: ignore[attr-defined]
        assert result.attainment == 1.0  # type: ignore[attr-defined]


def test_same_inputs_give_identical_results() -> None:
    trace = poisson(4.0, 300.0, seed=9, median_prompt_tokens=1500, median_output_tokens=100)
    first, second = run_all(trace), run_all(trace)
    for name in POLICY_NAMES:
        assert first[name] == second[name]


@dataclass
class Scripted:
    """A policy that asks for `plan[t]` replicas from time t on, and keeps every view."""

    plan: dict[float, int]
    name: str = "scripted"
    interval_s: float = 5.0
    source: MetricsSourceType = MetricsSourceType.direct
    views: list[FleetView] = field(default_factory=list)

    def decide(self, view: FleetView) -> ScaleChoice:
        self.views.append(view)
        wanted = [n for t, n in sorted(self.plan.items()) if t <= view.now_s]
        return ScaleChoice(wanted[-1] if wanted else view.spec_replicas, "scripted")


def test_new_replicas_are_ready_only_after_the_cold_start_and_billed_from_creation() -> None:
    trace = Trace("idle", (TraceRequest(1.0, 100, 5),), 300.0)
    config = replace(FLEET, cold_start_s=60.0, initial_replicas=1)
    result = simulate(trace, Scripted({10.0: 3}), config, ENGINE, TIMER)
    timeline = result.timeline
    for t, spec, ready in zip(
        timeline.time_s, timeline.spec_replicas, timeline.ready_replicas, strict=True
    ):
        if 10.0 <= t < 70.0:
            assert (spec, ready) == (3, 1), t
        if t >= 70.0:
            assert ready == 3, t
    assert result.gpu_hours == pytest.approx((300.0 + 2 * 290.0) / 3600.0)


def test_removed_replicas_drain_what_they_hold() -> None:
    # Long replies are in flight on all three replicas when two of them are removed at 30 s.
    requests = tuple(TraceRequest(i * 0.5, 200, 3000) for i in range(30))
    trace = Trace("long", requests, 600.0)
    config = replace(FLEET, initial_replicas=3)
    result = simulate(trace, Scripted({30.0: 1}), config, ENGINE, TIMER)
    assert result.num_unserved == 0
    assert not any(math.isnan(v) for v in result.ttft_s)
    # The two removed replicas were billed past 30 s while they finished their requests.
    assert result.gpu_hours > (600.0 + 2 * 30.0) / 3600.0


def test_policies_see_vllm_histograms_and_the_balancer_spreads_load() -> None:
    trace = poisson(6.0, 120.0, seed=4, median_prompt_tokens=500, median_output_tokens=100)
    policy = Scripted({})
    config = replace(FLEET, initial_replicas=3)
    simulate(trace, policy, config, ENGINE, TIMER)
    last = policy.views[-1]
    assert len(last.pods) == 3
    for pod in last.pods.values():
        assert pod.itl_buckets is not None
        bounds = [le for le, _ in pod.itl_buckets]
        assert bounds[:-1] == list(TOKEN_LATENCY_BUCKETS_S) and math.isinf(bounds[-1])
        counts = [c for _, c in pod.itl_buckets]
        assert counts == sorted(counts) and counts[-1] > 0  # cumulative, and every pod served


def test_prometheus_sourced_views_lag_by_at_most_one_scrape() -> None:
    @dataclass
    class PromScripted(Scripted):
        source: MetricsSourceType = MetricsSourceType.prometheus
        interval_s: float = 7.0

    trace = poisson(2.0, 200.0, seed=4)
    policy = PromScripted({})
    simulate(trace, policy, replace(FLEET, scrape_interval_s=15.0), ENGINE, TIMER)
    lags = [v.now_s - v.scraped_at_s for v in policy.views]
    assert max(lags) < 15.0 and max(lags) > 0


def test_static_sizing_is_the_fewest_replicas_meeting_the_peak() -> None:
    trace = poisson(12.0, 600.0, seed=8, median_prompt_tokens=500, median_output_tokens=150)
    sizing = size_for_peak(trace, FLEET, ENGINE, TIMER, peak_window_s=120.0)
    assert sizing.peak_attainment >= 0.99
    assert sizing.replicas > 1
    fewer = replace(FLEET, initial_replicas=sizing.replicas - 1)
    from tokenpilot_lab.workload import window

    peak = window(trace, sizing.peak_start_s, sizing.peak_start_s + sizing.peak_window_s)
    assert simulate(peak, StaticPolicy(sizing.replicas - 1), fewer, ENGINE, TIMER).attainment < 0.99


def test_every_contender_is_sized_on_the_budget_it_runs() -> None:
    # A load where one replica's capacity depends on the budget: the opening fleet and the
    # static fleet are sized on each contender's own engine, never on another budget's.
    trace = poisson(10.0, 300.0, seed=8, median_prompt_tokens=1500, median_output_tokens=150)
    entries, sizing = contenders(
        POLICY_NAMES,
        trace,
        FLEET,
        tuned_engine=TUNED,
        default_engine=ENGINE,
        timer=TIMER,
        model_timer=TIMER,
    )
    by_name = {e.name: e for e in entries}
    starts = {e.name: e.fleet.start_replicas for e in entries}
    assert starts["tokenpilot"] < starts["vllm-default-budget"]  # the budgets differ here
    assert by_name["static-peak+tuned"].engine_config is TUNED
    assert by_name["static-peak"].engine_config is ENGINE
    for engine in (ENGINE, TUNED):
        opening = size_for_opening(trace, FLEET, engine, TIMER).replicas
        peak = size_for_peak(trace, FLEET, engine, TIMER).replicas
        for entry in entries:
            if entry.engine_config is not engine:
                continue
            expected = peak if entry.name.startswith("static-peak") else opening
            assert entry.fleet.start_replicas == expected, entry.name
    assert sizing is not None and sizing.tuned_static is not None
    assert sizing.tuned_static.replicas == by_name["static-peak+tuned"].fleet.start_replicas
