"""A disaggregated service's prefill chunk, re-tuned from the mix its decode engines served
(core.disaggregation_plan.prefill_tuning): the prefill Deployment rolls to the chunk the mix
calls for when it serves materially more within the TTFT, under the re-tune's rules; the decode
pool keeps its batching; and the autoscaler prices the chunk the engines run."""

from __future__ import annotations

from typing import Any

from _llms import CLUSTER, by_name, by_product
from test_render_disaggregated import deployments, flag, planned, split

from tokenpilot.api.llmservice import LLMService, LLMServiceStatus
from tokenpilot.api.workload import TuningBasis
from tokenpilot.core.disaggregation_plan import phase_scaling, running_workload
from tokenpilot.core.render_plan import plan
from tokenpilot.core.status import tuning_status

NOW = "2026-12-06T12:00:00Z"
AUTOSCALED = {"enabled": True, "minReplicas": 1, "maxReplicas": 6}


def served(mean_prompt: float, p99_prompt: float, mean_output: float, requests: int = 600) -> Any:
    """status.phases.decode.workload: what the decode engines served."""
    return {
        "windowSeconds": 600.0,
        "requests": requests,
        "promptTokens": {"mean": mean_prompt, "p99": p99_prompt, "p99Resolution": 0.05},
        "outputTokens": {"mean": mean_output, "p99": mean_output * 4, "p99Resolution": 0.05},
        "meanContextTokens": mean_prompt + mean_output / 2,
        "arrivalRatePerSecond": 1.0,
        "observedAt": NOW,
    }


def with_status(svc: LLMService, **status: Any) -> LLMService:
    return svc.model_copy(update={"status": LLMServiceStatus.model_validate(status)})


def reconciled(svc: LLMService, now: str | None = NOW) -> Any:
    return plan(
        svc,
        nodes=CLUSTER,
        by_name=by_name,
        by_product=by_product,
        service_monitor_served=False,
        now=now,
    )


# Long prompts: a mean of 11,652 tokens, the P99 bucket's edge at 57,344, 175 out.
LONG = served(11652, 57344, 175)


def created(**spec: Any) -> tuple[LLMService, Any]:
    """A split service as created (no hints), and its first plan's status.tuning."""
    svc = split(**spec)
    first = planned(svc)
    return svc, tuning_status(first.tuning, "H100-80GB").model_dump(by_alias=True, mode="json")


def test_long_prompts_roll_the_prefill_pool_to_a_larger_chunk_and_say_so() -> None:
    svc, tuning = created()
    assert flag(deployments(planned(svc))["chat-prefill"], "--max-num-batched-tokens") == "1024"
    now = with_status(svc, tuning=tuning, phases={"decode": {"workload": LONG}})
    p = reconciled(now)
    prefill, decode = deployments(p)["chat-prefill"], deployments(p)["chat-decode"]
    assert flag(prefill, "--max-num-batched-tokens") == "4096"
    assert p.tuning.basis is TuningBasis.observed
    assert p.tuning.retuned is not None and "1024 -> 4096" in p.tuning.retuned
    assert p.tuning.planned_for is not None and p.tuning.planned_for.mean_prompt_tokens == 11652
    # The decode pool runs its decodes alone, at vLLM's floor, whatever the mix.
    assert decode == deployments(planned(svc))["chat-decode"]


def test_the_autoscaler_prices_the_chunk_the_engines_run() -> None:
    svc, tuning = created(autoscaling=AUTOSCALED)
    retuned = reconciled(with_status(svc, tuning=tuning, phases={"decode": {"workload": LONG}}))
    status = tuning_status(retuned.tuning, "H100-80GB").model_dump(by_alias=True, mode="json")
    after = with_status(svc, tuning=status, phases={"decode": {"workload": LONG}})
    prefill = phase_scaling(after, by_name=by_name, workload=running_workload(after)).policies[0]
    assert prefill.replica_model is not None and prefill.replica_model.token_budget == 4096
    # And the next reconcile keeps it: the plan is re-derived from what it was planned for.
    assert reconciled(after).tuning.decision.token_budget == 4096
    assert reconciled(after).tuning.retuned is None


def test_advise_publishes_the_chunk_and_rolls_nothing() -> None:
    svc, tuning = created(batching={"retune": "Advise"})
    p = reconciled(with_status(svc, tuning=tuning, phases={"decode": {"workload": LONG}}))
    assert flag(deployments(p)["chat-prefill"], "--max-num-batched-tokens") == "1024"
    assert p.tuning.recommendation is not None
    assert p.tuning.recommendation.max_num_batched_tokens == 4096
    assert p.tuning.recommendation.predicted_gain >= 1.1


def test_short_prompts_keep_the_chunk() -> None:
    svc, tuning = created()
    short = served(700, 4096, 200)
    p = reconciled(with_status(svc, tuning=tuning, phases={"decode": {"workload": short}}))
    assert p.tuning.decision.token_budget == 1024 and p.tuning.retuned is None


def test_too_few_requests_keep_the_chunk() -> None:
    svc, tuning = created()
    few = served(11652, 57344, 175, requests=50)
    p = reconciled(with_status(svc, tuning=tuning, phases={"decode": {"workload": few}}))
    assert p.tuning.decision.token_budget == 1024 and p.tuning.basis is TuningBasis.defaults


def test_no_roll_while_the_prefill_pool_scales_up() -> None:
    svc, tuning = created(autoscaling=AUTOSCALED)
    scaling = {
        "desiredReplicas": 3,
        "mode": "scale-up",
        "reasonCode": "TtftOverSlo",
        "reason": "the TTFT is over its share",
        "lastDecisionTime": NOW,
    }
    phases = {"decode": {"workload": LONG}, "prefill": {"autoscaling": scaling}}
    p = reconciled(with_status(svc, tuning=tuning, phases=phases))
    assert p.tuning.decision.token_budget == 1024
    assert p.tuning.recommendation is not None
    assert p.tuning.recommendation.state == "Waiting: the autoscaler is scaling up"


def test_no_second_roll_within_the_cooldown() -> None:
    svc, tuning = created()
    first = reconciled(with_status(svc, tuning=tuning, phases={"decode": {"workload": LONG}}))
    status = tuning_status(first.tuning, "H100-80GB").model_dump(by_alias=True, mode="json")
    # Half an hour on, the prompts are long again but twice as long: under the 1 h cooldown.
    longer = served(23000, 114688, 175)
    later = "2026-12-06T12:30:00Z"
    p = reconciled(with_status(svc, tuning=status, phases={"decode": {"workload": longer}}), later)
    assert p.tuning.decision.token_budget == first.tuning.decision.token_budget
    assert p.tuning.retuned is None
