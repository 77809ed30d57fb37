"""How the autoscaler sizes a disaggregated service's two pools (core.disaggregation_plan
.phase_scaling): each pool's bounds, SLO and replica model at the batching its engines run; the
mix followed only on a material move; each pool's status and conditions apart from the other's."""

from __future__ import annotations

import pytest
from _llms import by_name
from test_render_disaggregated import SPLIT, split

from tokenpilot.api.llmservice import Condition, ConditionStatus
from tokenpilot.api.workload import TokenFigures
from tokenpilot.core.autoscale.report import phase_conditions, phase_owned
from tokenpilot.core.autoscale.workload import MIN_REQUESTS, LearnedWorkload
from tokenpilot.core.disaggregation import REPLAN_CHANGE, PhaseWorkload
from tokenpilot.core.disaggregation_plan import hinted_workload, phase_scaling, phase_verdict
from tokenpilot.core.errors import InvalidSpec

AUTOSCALED = {"enabled": True, "minReplicas": 1, "maxReplicas": 6}


def learned(
    requests: int, prompt_mean: float, prompt_p99: float, output_mean: float
) -> LearnedWorkload:
    return LearnedWorkload(
        window_s=600.0,
        num_requests=requests,
        prompt=TokenFigures(mean=prompt_mean, p99=prompt_p99, p99_resolution=0.05),
        output=TokenFigures(mean=output_mean, p99=output_mean * 3, p99_resolution=0.05),
        arrival_rate_per_s=1.0,
        prefix_cache_hit_rate=None,
    )


def test_each_pool_answers_to_its_own_slo_between_its_own_bounds() -> None:
    pools = {**SPLIT, "prefill": {**SPLIT["prefill"], "minReplicas": 2, "maxReplicas": 4}}
    svc = split(autoscaling=AUTOSCALED, disaggregation=pools)
    scaling = phase_scaling(svc, by_name=by_name, workload=hinted_workload(svc)[0])
    prefill, decode = scaling.policies
    assert (prefill.min_replicas, prefill.max_replicas) == (2, 4)  # the pool's own
    assert (decode.min_replicas, decode.max_replicas) == (1, 6)  # spec.autoscaling's
    # The prefill pool: the TTFT left after the hand-off, no ITL; the decode pool: the ITL.
    assert prefill.itl_p99_slo_s is None
    assert prefill.ttft_p99_slo_s == pytest.approx(scaling.plan.prefill_ttft_s)
    assert 0 < prefill.ttft_p99_slo_s < 2.0
    assert decode.ttft_p99_slo_s is None and decode.itl_p99_slo_s == 0.05
    assert decode.replica_model is not None and decode.replica_model.prompts_arrive_computed
    assert scaling.labels == ("prefill-h100-80gb", "decode-l40s")


def test_the_models_price_the_batching_the_engines_run() -> None:
    svc = split(
        autoscaling=AUTOSCALED,
        batching={"maxNumBatchedTokens": 4096, "maxNumSeqs": 128},
    )
    scaling = phase_scaling(svc, by_name=by_name, workload=hinted_workload(svc)[0])
    for policy in scaling.policies:
        assert policy.replica_model is not None
        assert (policy.replica_model.token_budget, policy.replica_model.max_num_seqs) == (4096, 128)


def test_bounds_that_cross_are_refused_naming_the_pool() -> None:
    pools = {**SPLIT, "decode": {**SPLIT["decode"], "minReplicas": 8}}
    svc = split(autoscaling=AUTOSCALED, disaggregation=pools)
    with pytest.raises(InvalidSpec, match=r"spec\.disaggregation\.decode: minReplicas 8 > maxRe"):
        phase_scaling(svc, by_name=by_name, workload=hinted_workload(svc)[0])


def test_the_mix_is_followed_on_a_material_move_only() -> None:
    planned = PhaseWorkload(2000.0, 8000, 200.0)
    assert planned.replanned(None) is planned
    assert planned.replanned(learned(MIN_REQUESTS - 1, 9000, 30000, 400)) is planned
    near = 1 + REPLAN_CHANGE / 2
    assert planned.replanned(learned(MIN_REQUESTS, 2000 * near, 8000, 200)) is planned
    moved = planned.replanned(learned(MIN_REQUESTS, 2000, 8000, 200 * (1 + 2 * REPLAN_CHANGE)))
    assert moved is not planned
    assert moved.mean_output_tokens == pytest.approx(200 * (1 + 2 * REPLAN_CHANGE))


def condition(kind: str, status: ConditionStatus = ConditionStatus.true) -> Condition:
    return Condition(
        type=kind, status=status, reason="MetricsRead", last_transition_time="2026-12-06T00:00:00Z"
    )


def test_each_pool_owns_its_own_status_and_conditions() -> None:
    owned = {
        "autoscaling": {"desiredReplicas": 3, "mode": "scale-up"},
        "workload": {"requests": 12},
        "conditions": [condition("MetricsAvailable").model_dump(by_alias=True, mode="json")],
    }
    prefill, decode = phase_owned("prefill", owned), phase_owned("decode", owned)
    assert prefill["phases"] == {"prefill": {k: owned[k] for k in ("autoscaling", "workload")}}
    assert [c["type"] for c in prefill["conditions"]] == ["PrefillMetricsAvailable"]
    assert [c["type"] for c in decode["conditions"]] == ["DecodeMetricsAvailable"]
    # Read back, each pool sees only its own, under the name the report gives it.
    service_conditions = [
        condition("Ready"),
        condition("PrefillMetricsAvailable"),
        condition("DecodeMetricsAvailable", ConditionStatus.false),
    ]
    (mine,) = phase_conditions("decode", service_conditions)
    assert (mine.type, mine.status) == ("MetricsAvailable", ConditionStatus.false)


def test_the_status_says_whether_the_split_pays_for_the_mix() -> None:
    # As `plan --disaggregate` says it: long prompts need the split, code-like ones do not.
    svc = split(autoscaling=AUTOSCALED)
    long_prompts = phase_verdict(
        svc, by_name=by_name, workload=PhaseWorkload(12_000.0, 48_000, 200.0)
    )
    assert long_prompts.pays and long_prompts.words.startswith("split: one pool cannot meet")
    code = phase_verdict(svc, by_name=by_name, workload=PhaseWorkload(2_048.0, 7_400, 28.0))
    assert not code.pays and code.words.startswith("one pool:")
    said = phase_owned("decode", {}, {"splitPays": code.pays, "verdict": code.words})
    assert said["phases"]["splitPays"] is False
