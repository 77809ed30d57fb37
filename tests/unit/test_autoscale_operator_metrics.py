"""The operator's /metrics carries every tokenpilot_* series the generated dashboards and rules
query, with the labels they join on, and forgets a deleted service."""

from __future__ import annotations

import json
import re

from prometheus_client import generate_latest

from tokenpilot.adapters.metrics import parse_metrics
from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.api.workload import RetuneRecommendation, TokenFigures
from tokenpilot.core import vllm_metrics
from tokenpilot.core.autoscale import AutoscalePolicy, Evidence, History, decide
from tokenpilot.core.autoscale.observation import Observation
from tokenpilot.core.autoscale.workload import LearnedWorkload
from tokenpilot.core.dashboards.boards import all_dashboards
from tokenpilot.core.dashboards.rules import rule_groups

# Series another component exports.
NOT_OURS: set[str] = set()


def exported() -> OperatorMetrics:
    metrics = OperatorMetrics()
    observation = Observation(0.0, 2, 2, 2, 2, 0.0, 3.0, None, None)
    decision = decide(AutoscalePolicy(), History(), Evidence(observation), 0.0)
    metrics.record_decision("ns", "svc", decision, 0.004)
    metrics.record_targets(
        "ns",
        "svc",
        min_replicas=1,
        max_replicas=4,
        attainment=0.99,
        itl_p99_s=0.05,
        ttft_p99_s=2.0,
        token_budget=2048,
    )
    metrics.record_replica_cost("ns", "svc", "H100-80GB", 2 * 6.16)
    metrics.record_pace("ns", "svc", 1.3)
    metrics.reconcile_errors.labels("ns", "svc").inc()
    metrics.record_pool_decision("ns", "svc", "prefill", decision, 4096)
    metrics.record_pool_decision("ns", "svc", "decode", decision, 1024)
    metrics.record_workload("ns", "svc", LEARNED, ADVISED)
    return metrics


LEARNED = LearnedWorkload(
    window_s=300.0,
    num_requests=330,
    prompt=TokenFigures(mean=6100.0, p99=7828.0, p99_resolution=0.091),
    output=TokenFigures(mean=8.0, p99=8.0, p99_resolution=0.5),
    arrival_rate_per_s=1.1,
    prefix_cache_hit_rate=0.0,
)
ADVISED = RetuneRecommendation(
    max_num_batched_tokens=224,
    max_num_seqs=176,
    predicted_gain=1.4,
    state="Advised",
    reason="the workload the engines served calls for it",
)


def values(metrics: OperatorMetrics, name: str) -> dict[str, float]:
    """The service's series of `name`, keyed by their `stat` label ('' without one)."""
    page = parse_metrics(generate_latest(metrics.registry).decode())
    return {s.labels.get("stat", ""): s.value for s in page.series(name)}


def test_every_series_the_dashboards_and_rules_use_is_exported():
    text = json.dumps(all_dashboards()) + json.dumps(
        rule_groups(vllm_metrics.TOKEN_LATENCY_BUCKETS_S, vllm_metrics.TTFT_BUCKETS_S)
    )
    wanted = set(re.findall(r"tokenpilot_[a-z0-9_]+", text)) - NOT_OURS
    page = parse_metrics(generate_latest(exported().registry).decode())
    assert wanted <= set(page.samples), sorted(wanted - set(page.samples))
    for sample in page.series("tokenpilot_desired_replicas"):
        assert sample.labels == {"namespace": "ns", "llmservice": "svc"}


def test_a_forgotten_service_leaves_no_series():
    metrics = exported()
    metrics.forget("ns", "svc")
    page = parse_metrics(generate_latest(metrics.registry).decode())
    per_service = [
        sample
        for samples in page.samples.values()
        for sample in samples
        if sample.labels.get("llmservice") == "svc"
    ]
    assert per_service == []


def test_replica_cost_follows_the_sku_in_use():
    metrics = exported()
    metrics.record_replica_cost("ns", "svc", "L4-24GB", 0.8)
    page = parse_metrics(generate_latest(metrics.registry).decode())
    series = page.series("tokenpilot_replica_hourly_cost_dollars")
    assert [(s.labels, s.value) for s in series] == [
        ({"namespace": "ns", "llmservice": "svc", "sku": "L4-24GB"}, 0.8)
    ]
    metrics.record_replica_cost("ns", "svc", "L4-24GB", None)  # SKU unknown: no series
    page = parse_metrics(generate_latest(metrics.registry).decode())
    assert not page.series("tokenpilot_replica_hourly_cost_dollars")


def test_the_engines_pace_is_exported_once_measured():
    metrics = exported()
    page = parse_metrics(generate_latest(metrics.registry).decode())
    assert [s.value for s in page.series("tokenpilot_engine_step_pace_ratio")] == [1.3]
    metrics.record_pace("ns", "svc", None)  # a restarted autoscaler that has not measured yet
    page = parse_metrics(generate_latest(metrics.registry).decode())
    assert not page.series("tokenpilot_engine_step_pace_ratio")


def test_each_pool_of_a_split_service_has_its_series_until_joined_again():
    metrics = exported()
    page = parse_metrics(generate_latest(metrics.registry).decode())
    budgets = {s.labels["phase"]: s.value for s in page.series("tokenpilot_pool_token_budget")}
    assert budgets == {"prefill": 4096, "decode": 1024}
    desired = page.series("tokenpilot_pool_desired_replicas")
    assert {s.labels["phase"] for s in desired} == {"prefill", "decode"}
    assert all(s.labels["llmservice"] == "svc" for s in desired)
    metrics.forget_pools("ns", "svc")  # joined again into one pool
    page = parse_metrics(generate_latest(metrics.registry).decode())
    assert not [name for name in page.samples if name.startswith("tokenpilot_pool_")]
    assert page.series("tokenpilot_desired_replicas")  # the service's own stay


def test_the_learned_workload_and_the_recommendation_are_exported_and_go_when_unknown():
    metrics = exported()
    assert values(metrics, "tokenpilot_workload_prompt_tokens") == {"mean": 6100.0, "p99": 7828.0}
    assert values(metrics, "tokenpilot_workload_output_tokens") == {"mean": 8.0, "p99": 8.0}
    assert values(metrics, "tokenpilot_workload_requests") == {"": 330}
    assert values(metrics, "tokenpilot_workload_mean_context_tokens") == {"": 6104.0}
    assert values(metrics, "tokenpilot_workload_arrival_rate_per_second") == {"": 1.1}
    assert values(metrics, "tokenpilot_retune_recommended_token_budget") == {"": 224}
    assert values(metrics, "tokenpilot_retune_predicted_gain") == {"": 1.4}

    # Re-tuned (no recommendation left), then a fresh operator's memory (nothing learned).
    metrics.record_workload("ns", "svc", LEARNED, None)
    assert values(metrics, "tokenpilot_retune_predicted_gain") == {}
    assert values(metrics, "tokenpilot_retune_recommended_token_budget") == {}
    assert values(metrics, "tokenpilot_workload_requests") == {"": 330}
    metrics.record_workload("ns", "svc", None, None)
    for name in (
        "tokenpilot_workload_prompt_tokens",
        "tokenpilot_workload_output_tokens",
        "tokenpilot_workload_requests",
        "tokenpilot_workload_prefix_cache_hit_ratio",
    ):
        assert values(metrics, name) == {}, name
