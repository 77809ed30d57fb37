"""The renderer: vllm args, scheduling, probes, determinism, and refused extraArgs."""

from __future__ import annotations

import pytest
from _llms import CLUSTER, by_name, by_product, service
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.api.llmservice import BatchingSource, BoundKind, LLMService, SeqsSource
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.plan_inputs import PlanInputs, ServiceLevel, WorkloadHints
from tokenpilot.core.render import EMITTED_VLLM_FLAGS, SPEC_HASH_ANNOTATION, selected_by
from tokenpilot.core.render_plan import Plan, plan
from tokenpilot.core.tuner import recommend


def planned(svc: LLMService, monitor: bool = False) -> Plan:
    return plan(
        svc,
        nodes=CLUSTER,
        by_name=by_name,
        by_product=by_product,
        service_monitor_served=monitor,
    )


def deployment(svc: LLMService) -> dict:  # type: ignore[type-arg]
    return planned(svc).manifests[0]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_kinds_and_service_monitor_only_when_served() -> None:
    kinds = [m["kind"] for m in planned(service()).manifests]
    assert kinds == ["Deployment", "Service", "PodDisruptionBudget"]
    kinds = [m["kind"] for m in planned(service(), monitor=True).manifests]
    assert kinds[-1] == "ServiceMonitor"


def test_engine_series_are_labelled_with_their_service_and_namespace() -> None:
    svc = service()
    monitor = planned(svc, monitor=True).manifests[-1]
    (endpoint,) = monitor["spec"]["endpoints"]
    targets = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    pod_labels = deployment(svc)["spec"]["template"]["metadata"]["labels"]
    # The label the SLO rules group by comes from the label the renderer puts on engine pods.
    (source,) = targets["llmservice"]
    assert source == "__meta_kubernetes_pod_label_serving_tokenpilot_dev_llmservice"
    assert pod_labels["serving.tokenpilot.dev/llmservice"] == svc.metadata.name
    assert targets["namespace"] == ["__meta_kubernetes_namespace"]


# L40S cannot meet a 50 ms ITL at vLLM's smallest budget since issue 11 (test_tuner.py).
@pytest.mark.parametrize(("sku", "itl"), [("H100-80GB", "50ms"), ("L40S", "200ms")])
def test_auto_budget_comes_from_the_tuner(sku: str, itl: str) -> None:
    svc = service(accelerator={"sku": sku}, slo={"itlP99": itl, "ttftP99": "2s"})
    p = planned(svc)
    args = p.manifests[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    # The API's defaults are the tuner's: nothing but the SLOs needs passing.
    decision = recommend(
        PlanInputs.of(
            by_name(sku),
            svc.spec.model.shape.resolve(),
            ServiceLevel(itl_p99_s=float(itl.removesuffix("ms")) / 1e3, ttft_p99_s=2.0),
            WorkloadHints(),
        )
    ).decision
    assert p.facts.batching == decision
    assert flag(args, "--max-num-batched-tokens") == str(decision.token_budget)
    assert flag(args, "--max-num-seqs") == str(decision.max_num_seqs)
    assert flag(args, "--max-model-len") == "8192"
    assert decision.source is BatchingSource.measured_profile
    assert decision.set_by.kind is BoundKind.midpoint  # balanced, the API's default profile


def test_spec_integers_win_over_the_tuner() -> None:
    p = planned(service(batching={"maxNumBatchedTokens": 1024, "maxNumSeqs": 16}))
    assert (p.facts.batching.token_budget, p.facts.batching.max_num_seqs) == (1024, 16)
    assert p.facts.batching.source is BatchingSource.spec


def test_a_spec_budget_below_vllms_cap_caps_the_sequences() -> None:
    decision = planned(service(batching={"maxNumBatchedTokens": 64})).facts.batching
    assert (decision.token_budget, decision.max_num_seqs) == (64, 64)
    assert decision.max_num_seqs_source is SeqsSource.token_budget
    assert decision.set_by.kind is BoundKind.spec


def test_vllm_args_in_order_then_extra_args() -> None:
    svc = service(
        batching={"maxNumBatchedTokens": 4096, "maxNumSeqs": 64},
        engine={"maxModelLen": 8192, "extraArgs": ["--enable-prefix-caching"]},
    )
    args = deployment(svc)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert flag(args, "--max-num-batched-tokens") == "4096"
    assert flag(args, "--max-num-seqs") == "64"
    assert flag(args, "--max-model-len") == "8192"
    assert flag(args, "--served-model-name") == "llama-8b"
    assert "--enable-chunked-prefill" in args
    assert args[-1] == "--enable-prefix-caching"
    emitted = {a for a in args if a.startswith("--")} - {"--enable-prefix-caching"}
    assert emitted <= set(EMITTED_VLLM_FLAGS)


@pytest.mark.parametrize(
    "extra",
    [
        "--max-num-seqs=8",
        "--max_num_batched_tokens",
        "--port",
        "-tp",
        "--model",
        "--no-enable-chunked-prefill",
    ],
)
def test_extra_args_may_not_override_operator_flags(extra: str) -> None:
    with pytest.raises(InvalidSpec, match="extraArgs sets"):
        planned(service(engine={"extraArgs": [extra, "1"]}))


def test_scheduling_gpu_requests_affinity_tolerations() -> None:
    svc = service(
        accelerator={
            "sku": "H100-80GB",
            "gpusPerReplica": 2,
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        },
        engine={"tensorParallelSize": 2},
    )
    pod = deployment(svc)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expr = term["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expr == {
        "key": "nvidia.com/gpu.product",
        "operator": "In",
        "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-SXM5-80GB"],
    }
    assert {"key": "dedicated", "operator": "Exists"} in pod["tolerations"]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"


def test_probes_budget_fits_model_load() -> None:
    small = deployment(service())["spec"]["template"]["spec"]["containers"][0]
    big_svc = service(
        model__shape={"preset": "llama-3.1-70b"},
        engine={"tensorParallelSize": 4},
        accelerator={"sku": "H100-80GB"},
    )
    big = deployment(big_svc)["spec"]["template"]["spec"]["containers"][0]

    def budget(c: dict) -> int:  # type: ignore[type-arg]
        probe = c["startupProbe"]
        return probe["periodSeconds"] * probe["failureThreshold"]

    assert small["readinessProbe"]["httpGet"]["path"] == "/health"
    assert 600 <= budget(small) < budget(big)


def test_owner_reference_and_labels() -> None:
    for manifest in planned(service()).manifests:
        owner = manifest["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "LLMService" and owner["uid"] == "uid-1" and owner["controller"]
        assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tokenpilot"


@given(st.from_regex(r"[a-z]([a-z0-9-]{0,30}[a-z0-9])?", fullmatch=True))
def test_engine_pods_name_their_service_and_no_other(name: str) -> None:
    """The autoscaler's shared pod listing finds each pod's service from its labels; the
    rendered engine pods must name theirs, and a pod of no service names none."""
    pod_labels = deployment(service(name))["spec"]["template"]["metadata"]["labels"]
    assert selected_by(pod_labels) == name
    assert selected_by({"app.kubernetes.io/name": name}) is None


def test_pvc_source_mounts_the_claim() -> None:
    svc = service(
        model={"name": "m", "source": "pvc://weights/llama/8b", "shape": {"preset": "llama-3.1-8b"}}
    )
    pod = deployment(svc)["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"][0] == "/models/weights/llama/8b"
    assert {
        "name": "model-pvc",
        "persistentVolumeClaim": {"claimName": "weights", "readOnly": True},
    } in pod["volumes"]


@given(
    names=st.lists(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), unique=True, max_size=6),
)
def test_deterministic_with_sorted_env(names: list[str]) -> None:
    env = [{"name": n, "value": "v"} for n in names if n not in ("HF_HOME", "HF_TOKEN")]
    a = deployment(service(engine={"env": env}))
    b = deployment(service(engine={"env": list(reversed(env))}))
    assert a == b
    rendered = [e["name"] for e in a["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert rendered == sorted(rendered)


def test_spec_hash_changes_with_budget_not_with_replicas() -> None:
    base = deployment(service(batching={"maxNumBatchedTokens": 2048}))
    budget = deployment(service(batching={"maxNumBatchedTokens": 4096}))
    scaled = deployment(service(batching={"maxNumBatchedTokens": 2048}, replicas=5))
    h = SPEC_HASH_ANNOTATION
    assert base["metadata"]["annotations"][h] != budget["metadata"]["annotations"][h]
    assert base["metadata"]["annotations"][h] == scaled["metadata"]["annotations"][h]
    assert scaled["spec"]["replicas"] == 5
