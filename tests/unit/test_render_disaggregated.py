"""A disaggregated service as the reconciler renders it: the API's refusals, a prefill and a
decode Deployment each with its own GPU, tensor parallelism and batching, the llm-d router's
role labels and routing sidecar, NIXL's flags, and status.pools."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _llms import CLUSTER, by_name, by_product, service
from pydantic import ValidationError

from tokenpilot.api.llmservice import BoundKind, LLMService
from tokenpilot.core.disaggregation import PhaseWorkload, plan_phases
from tokenpilot.core.disaggregation_plan import phase_inputs
from tokenpilot.core.errors import InvalidSpec, UnknownGPU
from tokenpilot.core.render import ROLE_LABEL, SERVICE_LABEL
from tokenpilot.core.render_plan import Plan, plan
from tokenpilot.core.status import desired_status

SIDECAR = "ghcr.io/llm-d/llm-d-routing-sidecar:v0.4.0"
PICKER = {"inferencePool": {"endpointPicker": {"name": "epp", "port": 9002}}}
SPLIT = {
    "prefill": {"sku": "H100-80GB", "tensorParallelSize": 2, "replicas": 2},
    "decode": {"sku": "L40S", "replicas": 3},
    "routingSidecarImage": SIDECAR,
}


def split(**overrides: Any) -> LLMService:
    fields: dict[str, Any] = {
        "slo": {"ttftP99": "2s", "itlP99": "50ms"},
        "engine": {"maxModelLen": 131072},
        "routing": PICKER,
        "disaggregation": SPLIT,
    }
    fields.update(overrides)
    return service(**fields)


def planned(svc: LLMService) -> Plan:
    return plan(
        svc, nodes=CLUSTER, by_name=by_name, by_product=by_product, service_monitor_served=False
    )


def deployments(p: Plan) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in p.manifests if m["kind"] == "Deployment"}


def args_of(deployment: dict[str, Any]) -> list[str]:
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def flag(deployment: dict[str, Any], name: str) -> str:
    args = args_of(deployment)
    return args[args.index(name) + 1]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"routing": {}}, "needs spec.routing.inferencePool"),
        (
            {
                "autoscaling": {
                    "enabled": True,
                    "metrics": {"type": "prometheus", "prometheusUrl": "http://prom:9090"},
                }
            },
            "set spec.autoscaling.metrics.type to direct",
        ),
        (
            {
                "disaggregation": {
                    **SPLIT,
                    "decode": {"sku": "L40S", "minReplicas": 3, "maxReplicas": 2},
                }
            },
            "minReplicas must be <= its maxReplicas",
        ),
        (
            {"accelerator": {"pools": [{"sku": "H100-80GB"}]}},
            "do not go together",
        ),
        (
            {"disaggregation": {**SPLIT, "decode": {"sku": "auto"}}},
            "names its SKU",
        ),
        ({"disaggregation": {**SPLIT, "routingSidecarImage": ""}}, "routingSidecarImage"),
    ],
)
def test_the_api_refuses_a_split_it_cannot_run_naming_the_field(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        split(**overrides)


def test_each_pool_gets_its_deployment_gpu_parallelism_and_batching() -> None:
    svc = split()
    p = planned(svc)
    kinds = [m["kind"] for m in p.manifests]
    assert kinds == [
        "Deployment",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "InferencePool",
    ]
    found = deployments(p)
    prefill, decode = found["chat-prefill"], found["chat-decode"]
    assert (prefill["spec"]["replicas"], decode["spec"]["replicas"]) == (2, 3)
    # The budgets are plan_phases's for each pool's GPU and parallelism.
    phased = plan_phases(
        phase_inputs(svc, "prefill", svc.spec.disaggregation.prefill, by_name("H100-80GB")),  # type: ignore[union-attr]
        phase_inputs(svc, "decode", svc.spec.disaggregation.decode, by_name("L40S")),  # type: ignore[union-attr]
        PhaseWorkload.planned(None),
    )
    assert flag(prefill, "--max-num-batched-tokens") == str(phased.prefill.token_budget)
    assert flag(decode, "--max-num-batched-tokens") == str(phased.decode.token_budget) == "256"
    assert flag(prefill, "--tensor-parallel-size") == "2"
    assert flag(decode, "--tensor-parallel-size") == "1"
    gpus = [
        d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        for d in (prefill, decode)
    ]
    assert gpus == ["2", "1"]
    products = [
        d["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        for d in (prefill, decode)
    ]
    assert "NVIDIA-H100-80GB-HBM3" in products[0] and products[1] == ["NVIDIA-L40S"]


def test_the_pools_carry_what_the_llm_d_router_and_nixl_need() -> None:
    found = deployments(planned(split()))
    prefill, decode = found["chat-prefill"], found["chat-decode"]
    for d, role, kv_role in (
        (prefill, "prefill", "kv_producer"),
        (decode, "decode", "kv_consumer"),
    ):
        template = d["spec"]["template"]
        # The endpoint picker selects on the role; the Service and InferencePool on the service.
        assert template["metadata"]["labels"][ROLE_LABEL] == role
        assert template["metadata"]["labels"][SERVICE_LABEL] == "chat"
        config = json.loads(flag(d, "--kv-transfer-config"))
        assert config == {"kv_connector": "NixlConnector", "kv_role": kv_role}
        env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "status.podIP"
        )
        assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"]["value"] == "5600"
    # Prefill engines serve the service's port; decode engines sit behind the routing sidecar,
    # a native sidecar on that port, and are probed on their own.
    assert "initContainers" not in prefill["spec"]["template"]["spec"]
    assert flag(prefill, "--port") == "8000"
    (sidecar,) = decode["spec"]["template"]["spec"]["initContainers"]
    assert sidecar["image"] == SIDECAR and sidecar["restartPolicy"] == "Always"
    assert sidecar["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert "--vllm-port=8200" in sidecar["args"] and "--secure-proxy=false" in sidecar["args"]
    engine = decode["spec"]["template"]["spec"]["containers"][0]
    assert flag(decode, "--port") == "8200"
    assert engine["readinessProbe"]["httpGet"]["port"] == "engine"
    assert {"name": "engine", "containerPort": 8200, "protocol": "TCP"} in engine["ports"]


def test_status_pools_name_each_role_and_its_batching() -> None:
    svc = split()
    p = planned(svc)
    rows = [pp.status for pp in p.pools]
    assert [(r.role, r.sku, r.deployment, r.replicas) for r in rows] == [
        ("prefill", "H100-80GB", "chat-prefill", 2),
        ("decode", "L40S", "chat-decode", 3),
    ]
    assert rows[0].reason.startswith("H100-80GB prefill: chunks of")
    assert rows[1].reason.startswith("L40S decode: decodes alone")
    assert p.tuning.decision.set_by.kind is BoundKind.prefill_chunk
    status = desired_status(
        svc,
        deployment=None,
        sku_name=p.facts.sku_name,
        tuning=p.tuning,
        problem=None,
        now="2026-12-06T00:00:00Z",
        pools=rows,
    )
    assert status["poolsSummary"] == "prefill H100-80GB 0/2, decode L40S 0/3"


def test_a_spec_that_sets_both_integers_runs_them_on_both_pools() -> None:
    found = deployments(planned(split(batching={"maxNumBatchedTokens": 2048, "maxNumSeqs": 128})))
    for d in found.values():
        assert (flag(d, "--max-num-batched-tokens"), flag(d, "--max-num-seqs")) == ("2048", "128")


def test_an_unknown_gpu_or_an_extra_kv_flag_is_refused_naming_the_pool_or_field() -> None:
    with pytest.raises(UnknownGPU, match=r"disaggregation\.decode"):
        planned(split(disaggregation={**SPLIT, "decode": {"sku": "B300"}}))
    with pytest.raises(InvalidSpec, match=r"each pool of spec\.disaggregation"):
        planned(split(engine={"maxModelLen": 8192, "extraArgs": ["--kv-transfer-config={}"]}))


def test_an_aggregated_service_may_still_pass_a_kv_connector_in_extra_args() -> None:
    svc = service(engine={"extraArgs": ["--kv-transfer-config", '{"kv_connector":"LMCache"}']})
    (deployment,) = deployments(planned(svc)).values()
    assert "--kv-transfer-config" in args_of(deployment)


def test_a_p99_past_the_prefill_reach_is_in_its_status_with_the_width_that_serves_it() -> None:
    # Two H100s prefill, hand over and start decoding about 61,500 tokens within 2 s; four
    # reach about 89,000 (tests/unit/test_disaggregation.py).
    rows = [pp.status for pp in planned(split(workload={"promptTokensP99": 80000})).pools]
    prefill = rows[0].reason
    assert "the P99 prompt (80,000 tokens)" in prefill, prefill
    assert "a prefill replica of 2 H100-80GB GPUs meets the TTFT for prompts up to" in prefill
    assert "at tensorParallelSize 4 it would meet it" in prefill, prefill
    within = [pp.status for pp in planned(split(workload={"promptTokensP99": 40000})).pools]
    assert "prompts up to" not in within[0].reason, within[0].reason
