"""The fleet under prompts whose prefill alone breaks the TTFT SLO: replicas bought only for load.

Engines are priced by a plain linear step timer (8 ms a step, 20 us a prefill token), so a
100,000-token prompt takes about 3.6 s to prefill at a 512-token budget, whatever the fleet.
"""

from __future__ import annotations

from test_fleet import TIMER

from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.loop import ServiceState
from tokenpilot_lab.fleet import FleetConfig, simulate
from tokenpilot_lab.fleet.operator import OperatorPolicy
from tokenpilot_lab.sim import EngineConfig
from tokenpilot_lab.workload import Trace, TraceRequest

ENGINE = EngineConfig(
    num_kv_blocks=40_000, max_num_batched_tokens=512, max_num_seqs=256, max_model_len=131_072
)
FLEET = FleetConfig(min_replicas=1, max_replicas=16, initial_replicas=2, cold_start_s=60.0)
AUTOSCALE = AutoscalePolicy(min_replicas=1, max_replicas=16, itl_p99_slo_s=0.05, ttft_p99_slo_s=2.0)
LONG_PROMPT_TOKENS = 100_000


def trace(arrivals_s: list[float], prompt_tokens: int, duration_s: float) -> Trace:
    requests = tuple(TraceRequest(at_s, prompt_tokens, 20) for at_s in arrivals_s)
    return Trace("long-prompts", requests, duration_s)


def test_long_prompts_one_at_a_time_buy_no_replica_and_give_one_back() -> None:
    # One 100,000-token prompt every 20 s: each alone on an engine, every TTFT about 3.6 s.
    arrivals_s = [10.0 + 20.0 * i for i in range(45)]
    result = simulate(
        trace(arrivals_s, LONG_PROMPT_TOKENS, 900.0),
        OperatorPolicy(ServiceState(AUTOSCALE)),
        FLEET,
        ENGINE,
        TIMER,
    )
    assert result.attainment == 0.0  # no replica count could have met the 2 s TTFT
    assert max(result.timeline.spec_replicas) == 2
    assert [(e.from_replicas, e.to_replicas) for e in result.scale_events] == [(2, 1)]


def test_long_prompts_arriving_together_still_scale_out() -> None:
    # Eight 20,000-token prompts at once every 60 s: they share two engines' budgets, and the
    # TTFT breach is load, which more replicas spread.
    arrivals_s = [10.0 + 60.0 * burst + 0.01 * i for burst in range(10) for i in range(8)]
    result = simulate(
        trace(arrivals_s, 20_000, 600.0),
        OperatorPolicy(ServiceState(AUTOSCALE)),
        FLEET,
        ENGINE,
        TIMER,
    )
    assert max(result.timeline.spec_replicas) > 2
    assert any(e.to_replicas > e.from_replicas for e in result.scale_events)


def test_a_restarted_operator_keeps_the_replicas_and_steps_down_only_after_a_window() -> None:
    # Bursts of 20,000-token prompts for 400 s, then silence: the fleet grows, then comes back
    # down. Restarted at 420 s, the operator's autoscaler starts afresh: it keeps the replicas
    # it finds, and steps down only once its new forecast has seen the 300 s scale-down window.
    arrivals_s = [10.0 + 60.0 * burst + 0.01 * i for burst in range(7) for i in range(8)]
    load = trace(arrivals_s, 20_000, 1200.0)
    kept = simulate(load, OperatorPolicy(ServiceState(AUTOSCALE)), FLEET, ENGINE, TIMER)
    restarted = simulate(
        load, OperatorPolicy(ServiceState(AUTOSCALE), restarts_at_s=(420.0,)), FLEET, ENGINE, TIMER
    )
    downs = [e for e in restarted.scale_events if e.to_replicas < e.from_replicas]
    assert not [e for e in downs if 420.0 <= e.time_s < 420.0 + 300.0]
    assert any(e.time_s >= 720.0 for e in downs)  # then it does come down
    # A restart after the run's end changes nothing.
    late = simulate(
        load, OperatorPolicy(ServiceState(AUTOSCALE), restarts_at_s=(5000.0,)), FLEET, ENGINE, TIMER
    )
    assert late.scale_events == kept.scale_events
    assert late.attainment == kept.attainment
