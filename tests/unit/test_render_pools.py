"""A service on several GPU types: the API's refusals, one Deployment per pool with its own
budget, and status.pools."""

from __future__ import annotations

from typing import Any

import pytest
from _llms import CLUSTER, by_name, by_product, node, service
from pydantic import ValidationError

from tokenpilot.api.llmservice import LLMService, PoolState
from tokenpilot.core.errors import Infeasible, UnknownGPU
from tokenpilot.core.pool_plan import PoolLive, observe_pools
from tokenpilot.core.render import POOL_LABEL, SERVICE_LABEL
from tokenpilot.core.render_plan import Plan, plan

POOLS = [
    {"sku": "H100-80GB", "maxReplicas": 4},
    {"sku": "L40S", "maxReplicas": 4},
]
SLO = {"itlP99": "100ms", "ttftP99": "2s"}


def pooled(pools: list[dict[str, Any]] = POOLS, **overrides: Any) -> LLMService:
    return service(accelerator={"pools": pools}, slo=SLO, **overrides)


def planned(svc: LLMService, live: dict[str, PoolLive] | None = None, nodes=CLUSTER) -> Plan:  # type: ignore[no-untyped-def]
    return plan(
        svc,
        nodes=nodes,
        by_name=by_name,
        by_product=by_product,
        service_monitor_served=False,
        now="2026-12-03T12:00:00Z",
        pools_live=live,
    )


def deployments(p: Plan) -> list[dict[str, Any]]:
    return [m for m in p.manifests if m["kind"] == "Deployment"]


def flag(deployment: dict[str, Any], name: str) -> str:
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return str(args[args.index(name) + 1])


def test_each_pool_gets_its_own_deployment_budget_and_placement() -> None:
    p = planned(pooled(replicas=2))
    h100, l40s = deployments(p)
    assert [h100["metadata"]["name"], l40s["metadata"]["name"]] == ["chat-h100-80gb", "chat-l40s"]
    for d, label in ((h100, "h100-80gb"), (l40s, "l40s")):
        assert d["spec"]["selector"]["matchLabels"] == {SERVICE_LABEL: "chat", POOL_LABEL: label}
        assert d["spec"]["template"]["metadata"]["labels"][POOL_LABEL] == label
    products = [
        d["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        for d in (h100, l40s)
    ]
    assert any("NVIDIA-L40S" in v for v in products) and any(
        "H100" in " ".join(v) for v in products
    )
    # Each pool runs its own GPU's answer: the budgets differ, and status.pools says which.
    budgets = [int(flag(d, "--max-num-batched-tokens")) for d in (h100, l40s)]
    assert [s.max_num_batched_tokens for s in (pp.status for pp in p.pools)] == budgets
    assert budgets[0] != budgets[1]
    # The Service and the PDB select every pool's pods.
    svc_manifest = next(m for m in p.manifests if m["kind"] == "Service")
    assert svc_manifest["spec"]["selector"] == {SERVICE_LABEL: "chat"}
    # Unpriced: the spec's order; the two replicas of demand go to the first pool.
    assert [d["spec"]["replicas"] for d in (h100, l40s)] == [2, 0]
    assert [pp.status.state for pp in p.pools] == [PoolState.Serving, PoolState.Idle]


def test_priced_pools_buy_the_cheapest_capacity() -> None:
    pools = [
        {"sku": "H100-80GB", "maxReplicas": 4, "pricePerGpuHour": 10.0},
        {"sku": "L40S", "maxReplicas": 8, "pricePerGpuHour": 0.5},
    ]
    p = planned(pooled(pools, replicas=1))
    h100, l40s = (pp.status for pp in p.pools)
    assert h100.replicas == 0 and l40s.replicas >= 1
    assert l40s.requests_per_s_per_replica is not None and l40s.price_per_replica_hour == 0.5
    assert "first in price per capacity" in l40s.reason


def test_a_pool_unschedulable_past_its_wait_spills_over_to_the_next() -> None:
    svc = service(accelerator={"pools": POOLS, "spillOver": {"after": "30s"}}, slo=SLO, replicas=2)
    waiting = planned(svc, {"h100-80gb": PoolLive(2, 0, 10.0, "0/4 nodes are available")})
    assert waiting.pools[0].status.replicas == 2
    assert "spills over in 20 s" in waiting.pools[0].status.reason
    spilled = planned(svc, {"h100-80gb": PoolLive(2, 0, 31.0, "Insufficient nvidia.com/gpu")})
    h100, l40s = (pp.status for pp in spilled.pools)
    assert h100.state is PoolState.SpilledOver and h100.replicas == 0
    assert h100.spilled_since == "2026-12-03T12:00:00Z"
    assert "Insufficient nvidia.com/gpu" in h100.reason
    assert l40s.replicas >= 2  # an L40S replica serves less than an H100 one


def test_pods_and_deployments_are_read_into_each_pools_live_view() -> None:
    deployments = [
        {
            "metadata": {"labels": {POOL_LABEL: "h100-80gb"}},
            "spec": {"replicas": 2},
            "status": {"readyReplicas": 1},
        }
    ]
    pod = {
        "metadata": {"labels": {POOL_LABEL: "h100-80gb"}},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. "
                    "preemption: not helpful",
                    "lastTransitionTime": "2026-12-03T11:59:15Z",
                }
            ]
        },
    }
    live = observe_pools(deployments, [pod], "2026-12-03T12:00:00Z")
    assert live["h100-80gb"] == PoolLive(
        2, 1, 45.0, "0/4 nodes are available: 4 Insufficient nvidia.com/gpu"
    )


def test_a_pool_whose_gpu_no_node_has_still_renders_but_no_pool_at_all_is_infeasible() -> None:
    only_h100 = [n for n in CLUSTER if "L40S" not in (n.gpu_product or "")]
    p = planned(pooled(), nodes=only_h100)
    assert "no node offers" in p.pools[1].status.reason
    with pytest.raises(Infeasible, match=r"no node offers a GPU of any of accelerator\.pools"):
        planned(pooled(), nodes=[node("cpu", None, 0)])


def test_an_unknown_pool_sku_is_named() -> None:
    with pytest.raises(UnknownGPU, match=r"accelerator\.pools B300"):
        planned(pooled([{"sku": "B300"}]))


@pytest.mark.parametrize(
    ("accelerator", "words"),
    [
        ({"sku": "L40S", "pools": POOLS}, "leave accelerator.sku unset"),
        ({"pools": [{"sku": "auto"}]}, "a pool names its SKU"),
        ({"pools": [{"sku": "L40S", "minReplicas": 5, "maxReplicas": 2}]}, "minReplicas must be"),
        ({"pools": [{"sku": "L40S"}, {"sku": "L40S"}]}, "one pool per SKU"),
        (
            {"pools": [{"sku": "L40S", "pricePerGpuHour": 1}, {"sku": "H100-80GB"}]},
            "every pool a pricePerGpuHour or none",
        ),
        ({"pools": POOLS, "spillOver": {"after": "30"}}, "with its unit"),
    ],
)
def test_bad_pools_are_refused_naming_the_fix(accelerator: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        service(accelerator=accelerator)


def test_pool_gpus_must_cover_tensor_parallelism() -> None:
    with pytest.raises(
        ValidationError, match=r"gpusPerReplica must be >= engine\.tensorParallelSize"
    ):
        service(
            accelerator={"pools": [{"sku": "H100-80GB", "gpusPerReplica": 1}]},
            engine={"tensorParallelSize": 2},
        )
