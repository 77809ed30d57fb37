"""The fleet of a disaggregated service: the hand-off between its pools, what each pool's pages
show, and the operator scaling each pool on its own signal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from _llms import by_name, service
from _steps import LinearStep

from tokenpilot.core.disaggregation import DEFAULT_KV_LINK, KvLink, kv_transfer_s
from tokenpilot.core.plan_inputs import plan_inputs
from tokenpilot.core.roofline import PrefillChunk
from tokenpilot_lab.fleet import Balancer, FleetConfig
from tokenpilot_lab.fleet.disagg_compare import run_disaggregated
from tokenpilot_lab.fleet.disagg_simulator import simulate_disaggregated
from tokenpilot_lab.fleet.phases_operator import PhasesOperator
from tokenpilot_lab.fleet.policies import StaticPolicy
from tokenpilot_lab.fleet.pool_simulator import FleetPool
from tokenpilot_lab.fleet.pool_view import PoolsChoice, PoolsView
from tokenpilot_lab.sim import BUILTIN_TRUTHS, EngineConfig
from tokenpilot_lab.workload import Trace, TraceRequest, poisson

TIMER = LinearStep()
PREFILL = EngineConfig(num_kv_blocks=20_000, max_num_batched_tokens=2048, max_num_seqs=256)
DECODE = EngineConfig(
    num_kv_blocks=20_000,
    max_num_batched_tokens=256,
    max_num_seqs=256,
    enable_prefix_caching=False,
)
TRANSFER_S = 0.001  # per 1,000 prompt tokens


@dataclass
class Fixed:
    counts: tuple[int, int]
    name: str = "fixed"
    interval_s: float = 5.0
    source: Any = StaticPolicy(1).source
    views: list[PoolsView] = field(default_factory=list)

    def decide(self, view: PoolsView) -> PoolsChoice:
        self.views.append(view)
        return PoolsChoice(self.counts, "fixed")


def pools(prefill: int = 1, decode: int = 1) -> tuple[FleetPool, FleetPool]:
    return (
        FleetPool("H100-80GB", "prefill", PREFILL, TIMER, 1.0, initial_replicas=prefill),
        FleetPool("H100-80GB", "decode", DECODE, TIMER, 1.0, initial_replicas=decode),
    )


def run(trace: Trace, policy: Fixed, *p: FleetPool) -> Any:
    return simulate_disaggregated(
        trace,
        policy,
        FleetConfig(balancer=Balancer.least_request),
        *(p or pools()),
        lambda prompt: TRANSFER_S * prompt / 1000,
    )


def test_a_requests_ttft_is_its_prefill_the_transfer_and_the_decodes_first_step() -> None:
    # Requests far apart, each prompt within one prefill step: none waits, so each TTFT is
    # exactly its three parts.
    trace = Trace(
        "apart", tuple(TraceRequest(1.0 + 10 * i, 400 * (i + 1), 4) for i in range(5)), 60.0
    )
    result = run(trace, Fixed((1, 1))).result
    for request, ttft_s in zip(trace.requests, result.ttft_s, strict=True):
        prompt = request.num_prompt_tokens
        prefill_s = TIMER.iteration_s(0, 0, (PrefillChunk(prompt, 0),))
        first_s = TIMER.iteration_s(0, 0, (PrefillChunk(1, prompt - 1),))
        assert ttft_s == pytest.approx(prefill_s + TRANSFER_S * prompt / 1000 + first_s)
    assert result.num_met == trace.num_requests


def test_each_pools_pages_show_its_own_phase() -> None:
    trace = Trace("trickle", tuple(TraceRequest(0.5 + i, 500, 20) for i in range(60)), 70.0)
    policy = Fixed((1, 1))
    run(trace, policy)
    last = policy.views[-1]
    (prefill_page,) = last.pools[0].view.pods.values()
    (decode_page,) = last.pools[1].view.pods.values()
    # The prefill engine generates one token a request; the decode engine every token the
    # client sees, its prompts handed over (no prefix cache on it).
    assert prefill_page.output_tokens_total == prefill_page.requests_total
    assert decode_page.output_tokens_total == 20 * decode_page.requests_total
    assert decode_page.prompt_tokens_total == 500 * decode_page.requests_total
    assert decode_page.cached_prompt_tokens_total == 0


def test_a_hand_off_with_no_decode_replica_ready_waits_for_one() -> None:
    trace = Trace("two", (TraceRequest(1.0, 800, 4), TraceRequest(2.0, 800, 4)), 200.0)
    prefill, decode = pools(1, 0)
    late = FleetPool(decode.sku, decode.label, decode.engine, TIMER, 1.0, max_replicas=2)
    # The policy asks for one decode replica at the first evaluation; it is Ready a cold start
    # later, and both hand-offs go to it then.
    result = run(trace, Fixed((1, 1)), prefill, late).result
    cold_s = FleetConfig().cold_start_s
    assert result.num_unserved == 0
    assert all(t >= 5.0 + cold_s - 2.0 for t in result.ttft_s)


# ----- the operator on both pools ----------------------------------------------------------


def spec() -> Any:
    return service(
        slo={"ttftP99": "2s", "itlP99": "50ms"},
        engine={"maxModelLen": 65_536},
        autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 32},
        batching={"retune": "Off"},
    ).spec


def operator_run(trace: Trace, **engines: Any) -> Any:
    h100 = by_name("H100-80GB")
    return run_disaggregated(
        trace,
        FleetConfig(),
        spec(),
        (h100, h100),
        (1.0, 1.0),
        ((1, 32), (1, 32)),
        DEFAULT_KV_LINK,
        **engines,
    )


def test_each_pool_scales_on_its_own_signal() -> None:
    # Long prompts with short answers load the prefill pool; short prompts with long answers
    # the decode pool. The same operator grows the pool its load falls on.
    prompts = operator_run(
        poisson(3.0, 600.0, seed=1, median_prompt_tokens=12_000, median_output_tokens=16)
    )
    answers = operator_run(
        poisson(3.0, 600.0, seed=1, median_prompt_tokens=200, median_output_tokens=3_000)
    )
    p_prefill, p_decode = (b.peak_replicas for b in prompts.pooled.pools)
    a_prefill, a_decode = (b.peak_replicas for b in answers.pooled.pools)
    assert p_prefill > p_decode
    assert a_decode > a_prefill
    # Among the requests the engines accept, most meet both SLOs either way (the longest
    # prompts cannot prefill within the TTFT on one H100).
    assert prompts.pooled.result.servable_attainment >= 0.9
    assert answers.pooled.result.servable_attainment >= 0.95


def test_the_operator_replans_once_the_decode_pool_has_learned_the_mix() -> None:
    result = operator_run(
        poisson(3.0, 600.0, seed=2, median_prompt_tokens=12_000, median_output_tokens=16)
    )
    (at_s, workload), *_ = result.operator.replans
    assert 0 < at_s < 600
    # Learned from the engines' histograms: near the generator's mix (log-normal, sigma 0.8:
    # mean = median x e^0.32), not the defaults it opened on.
    assert 12_000 < workload.mean_prompt_tokens < 25_000


def test_engines_and_a_link_unlike_the_plan_slow_the_requests_not_the_plan() -> None:
    # Requests far apart: each TTFT is its own prefill, hand-off and first step. Engines that
    # run as a hidden truth prices them, or a link a tenth as fast as the one planned, serve
    # every request later; the operator plans exactly as before (it knows neither).
    trace = Trace("apart", tuple(TraceRequest(5.0 + 20 * i, 16_000, 4) for i in range(10)), 240.0)
    planned = operator_run(trace)
    slow_link = operator_run(trace, true_link=KvLink(DEFAULT_KV_LINK.gbps / 10, "a test"))
    truth = operator_run(trace, truth=BUILTIN_TRUTHS["launch-overhead"])
    for run in (slow_link, truth):
        assert run.operator.plan == planned.operator.plan
        times = zip(planned.pooled.result.ttft_s, run.pooled.result.ttft_s, strict=True)
        assert all(after > before for before, after in times)
    # The hand-off alone: a tenth of the bandwidth, ten times the transfer.
    shape = plan_inputs(spec(), by_name("H100-80GB")).shape
    extra_s = 9 * kv_transfer_s(shape, 16_000, DEFAULT_KV_LINK)
    for before, after in zip(
        planned.pooled.result.ttft_s, slow_link.pooled.result.ttft_s, strict=True
    ):
        assert after - before == pytest.approx(extra_s, rel=0.05)


def test_the_disaggregated_operator_reads_nothing_of_the_trace() -> None:
    h100 = by_name("H100-80GB")
    inputs = (plan_inputs(spec(), h100), plan_inputs(spec(), h100))
    one = PhasesOperator.created(spec(), inputs, ((1, 32), (1, 32)))
    two = PhasesOperator.created(spec(), inputs, ((1, 32), (1, 32)))
    assert [s.policy for s in one.states] == [s.policy for s in two.states]
    assert one.plan == two.plan


@dataclass
class RollsPrefill:
    """Keeps one replica a pool and, at its first evaluation, gives the prefill pool a new
    budget."""

    to: tuple[int, int]
    name: str = "rolls"
    interval_s: float = 5.0
    source: Any = StaticPolicy(1).source
    rolling: list[bool] = field(default_factory=list)

    def decide(self, view: PoolsView) -> PoolsChoice:
        self.rolling.append(view.pools[0].view.rolling_out)
        batching = (self.to, None) if len(self.rolling) == 1 else ()
        return PoolsChoice((2, 1), "fixed", batching)


def test_a_pool_rolls_to_a_new_budget_as_a_deployment_does() -> None:
    trace = poisson(2.0, 600.0, seed=3, median_prompt_tokens=2_000, median_output_tokens=50)
    policy = RollsPrefill((4096, 256))
    pooled = run(trace, policy, *pools(prefill=2))
    result = pooled.result
    (rollout,) = result.rollouts
    assert (rollout.from_batching, rollout.to_batching) == ((2048, 256), (4096, 256))
    # maxSurge 1: each old pod is replaced in turn, one cold start after another.
    cold_s = FleetConfig().cold_start_s
    assert rollout.finished_s is not None
    assert 2 * cold_s <= rollout.finished_s - rollout.started_s <= 2 * cold_s + 10.0
    assert rollout.surge_gpu_hours == pytest.approx(2 * cold_s / 3600.0, rel=0.1)
    # The policy saw the pool rolling, then not; the pods it billed include the surge; and
    # maxUnavailable 0 lost no request.
    assert policy.rolling[1] and not policy.rolling[-1]
    assert pooled.pools[0].gpu_hours == pytest.approx(
        2 * 600 / 3600 + rollout.surge_gpu_hours, rel=0.02
    )
    assert result.num_unserved == 0
    assert result.num_rejected == run(trace, Fixed((2, 1)), *pools(prefill=2)).result.num_rejected


def test_the_operator_re_tunes_the_prefill_chunk_once_it_has_learned_long_prompts() -> None:
    auto = service(
        slo={"ttftP99": "2s", "itlP99": "50ms"},
        engine={"maxModelLen": 131_072},
        autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 32},
    ).spec
    h100 = by_name("H100-80GB")
    # Two GPUs a prefill replica: chunks of 1,024 tokens leave its GEMMs short of their pace
    # (on one GPU the gain from a larger chunk is under the re-tune's 10 %, and nothing rolls).
    trace = poisson(2.0, 900.0, seed=2, median_prompt_tokens=8_192)
    run = run_disaggregated(
        trace,
        FleetConfig(),
        auto,
        (h100, h100),
        (1.0, 1.0),
        ((1, 32), (1, 32)),
        DEFAULT_KV_LINK,
        tensor_parallel=(2, 1),
    )
    (retune,) = run.operator.retunes
    assert retune.from_batching[0] == 1024 and retune.to_batching[0] > 1024
    assert "load per replica" in retune.why
    report = run.operator.report()
    assert report["basis"] == "Observed" and report["prefill_batching"][0] == retune.to_batching[0]
    # The simulated Deployment rolled to it; the autoscaler prices it from then on.
    (rollout,) = run.pooled.result.rollouts
    assert rollout.to_batching == retune.to_batching and rollout.started_s == retune.at_s
    assert run.operator.inputs[0].hints.token_budget == retune.to_batching[0]
