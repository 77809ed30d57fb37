"""Render one LLMService into the Kubernetes objects that serve it.

`render(service, facts)` returns plain dicts (Deployment, Service, PodDisruptionBudget and,
when that CRD is served, a ServiceMonitor) ready for server-side apply. It is deterministic:
the same inputs give byte-identical output (env sorted by name, tolerations in a fixed order),
and the Deployment carries a hash of its own spec so a person can see at a glance whether two
revisions differ. Facts are what the cluster told us; nothing here reads the cluster.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.llmservice import API_VERSION, KIND, LLMService
from tokenpilot.core.batching import BatchingDecision
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.plan_inputs import service_level
from tokenpilot.core.sku import GPU_PRODUCT_LABEL, GPU_RESOURCE
from tokenpilot.core.vllm_metrics import buckets_flag, rendered_buckets

MANAGED_BY = "tokenpilot"
SERVICE_LABEL = "serving.tokenpilot.dev/llmservice"
SPEC_HASH_ANNOTATION = "serving.tokenpilot.dev/spec-hash"
# On a pool's pods and in its Deployment's selector: which of the service's GPU pools it is.
POOL_LABEL = "serving.tokenpilot.dev/pool"
HTTP_PORT = 8000
# A disaggregated service's pods (core.disaggregation_plan): the label the llm-d router's
# endpoint picker tells prefill from decode pods by, the port a decode engine serves on behind
# its routing sidecar (which takes HTTP_PORT), and NIXL's side channel (vLLM's default port).
ROLE_LABEL = "llm-d.ai/role"
BEHIND_SIDECAR_PORT = 8200
NIXL_SIDE_CHANNEL_PORT = 5600
# Outside /root: a non-root engine (POD_SECURITY) cannot traverse the image's /root (mode 700).
CACHE_MOUNT = "/var/cache/tokenpilot"
# Beyond the startup probe's window, what a rollout may spend on scheduling and on pulling a
# vLLM image of about 10 GB before the Deployment controller calls it stalled.
PROGRESS_ALLOWANCE_S = 600
STARTUP_PERIOD_S = 10
# Seconds a terminating engine keeps serving before SIGTERM: endpoint removal takes a few
# seconds to reach every kube-proxy and gateway, and requests routed meanwhile must not fail.
PRESTOP_SLEEP_S = 5
PVC_MOUNT_ROOT = "/models"

# Every flag the renderer may put on the `vllm serve` command line, mapped to the spec field
# that sets it. An engine-tier test checks each against the real vLLM argument parser, and a
# user extraArg naming one of them is refused rather than silently overriding the operator.
EMITTED_VLLM_FLAGS: dict[str, str] = {
    "--served-model-name": "spec.model.name",
    "--revision": "spec.model.revision",
    "--host": "the operator (it serves on 0.0.0.0)",
    "--port": f"the operator (it serves on port {HTTP_PORT})",
    "--tensor-parallel-size": "spec.engine.tensorParallelSize",
    "--gpu-memory-utilization": "spec.engine.gpuMemoryUtilization",
    "--max-model-len": "spec.engine.maxModelLen",
    "--max-num-batched-tokens": "spec.batching.maxNumBatchedTokens",
    "--max-num-seqs": "spec.batching.maxNumSeqs",
    "--enable-chunked-prefill": "spec.batching.chunkedPrefill",
    "--no-enable-chunked-prefill": "spec.batching.chunkedPrefill",
    "--download-dir": "the operator (the model cache volume)",
    "--custom-histogram-buckets": "spec.engine.workloadMetrics",
    "--enable-mfu-metrics": "spec.engine.workloadMetrics",
}
# Flags that are not emitted but would contradict what is emitted.
_RESERVED_FLAGS: dict[str, str] = {
    "--model": "spec.model.source",
    "-tp": "spec.engine.tensorParallelSize",
}
# Environment the renderer sets; a user env entry with one of these names is refused.
_RESERVED_ENV = ("HF_HOME", "HF_TOKEN")


@dataclass(frozen=True)
class PhaseRender:
    """What a disaggregated service's pool adds to its Deployment: its role, its engines'
    tensor parallelism and KV-transfer config, and (decode) the routing sidecar's image."""

    role: str
    tensor_parallel_size: int
    kv_transfer_config: str
    sidecar_image: str | None = None


@dataclass(frozen=True)
class PoolRender:
    """One GPU pool's own Deployment: its name, its pool label, its replicas and placement."""

    sku: str
    deployment: str
    label: str
    replicas: int
    gpus_per_replica: int
    node_selector: Mapping[str, str]
    phase: PhaseRender | None = None


@dataclass(frozen=True)
class RenderFacts:
    """What the cluster and the planner told us, as data; `pool` for one pool's Deployment
    of a service with spec.accelerator.pools."""

    sku_name: str
    gpu_product_labels: tuple[str, ...]
    batching: BatchingDecision
    service_monitor_served: bool = False
    model_load_budget_s: int = 900
    pool: PoolRender | None = None


def pool_label_value(sku: str) -> str:
    """A SKU as a label value and a name suffix: `H100-80GB` -> `h100-80gb`."""
    return re.sub(r"[^a-z0-9-]+", "-", sku.lower()).strip("-")


def pool_deployment_name(service: LLMService, sku: str) -> str:
    return f"{service.metadata.name}-{pool_label_value(sku)}"


def labels(service: LLMService) -> dict[str, str]:
    """Labels on every object rendered for this service."""
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": service.metadata.name,
        "app.kubernetes.io/component": "engine",
        "app.kubernetes.io/part-of": "tokenpilot",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        SERVICE_LABEL: service.metadata.name,
    }


def selector(service: LLMService) -> dict[str, str]:
    """The engine pods' selector; one label, so it never needs to change (it is immutable)."""
    return {SERVICE_LABEL: service.metadata.name}


def selected_by(labels: Mapping[str, str]) -> str | None:
    """The name of the LLMService whose `selector` picks a pod with these labels, if any."""
    return labels.get(SERVICE_LABEL)


def selector_string(service: LLMService) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector(service).items()))


def endpoint(service: LLMService) -> str:
    meta = service.metadata
    return f"http://{meta.name}.{meta.namespace}.svc:{HTTP_PORT}/v1"


def owner_reference(service: LLMService) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": service.metadata.name,
        "uid": service.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(service: LLMService, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": service.metadata.namespace,
        "labels": labels(service),
        "ownerReferences": [owner_reference(service)],
    }


def _model_arg(source: str) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """The positional model argument, plus the volumes and mounts the source needs."""
    scheme, _, rest = source.partition("://")
    if scheme == "hf":
        return rest, [], []
    if scheme == "file":
        return rest if rest.startswith("/") else "/" + rest, [], []
    if scheme == "pvc":
        claim, _, path = rest.partition("/")
        mount = f"{PVC_MOUNT_ROOT}/{claim}"
        volume = {
            "name": "model-pvc",
            "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
        }
        volume_mount = {"name": "model-pvc", "mountPath": mount, "readOnly": True}
        return f"{mount}/{path}".rstrip("/"), [volume], [volume_mount]
    # s3:// and anything vLLM can stream itself is passed through unchanged.
    return source, [], []


def _flag_name(arg: str) -> str:
    """`--max_num_seqs=8` -> `--max-num-seqs` (vLLM accepts both spellings)."""
    name = arg.split("=", 1)[0]
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


def check_extra_args(extra_args: list[str]) -> None:
    """Refuse an extraArg that names a flag the operator sets; say which field to use."""
    owned = {**EMITTED_VLLM_FLAGS, **_RESERVED_FLAGS}
    for arg in extra_args:
        if not arg.startswith("-"):
            continue
        name = _flag_name(arg)
        if name in owned:
            raise InvalidSpec(
                f"spec.engine.extraArgs sets {name}, which the operator sets from "
                f"{owned[name]}; remove it from extraArgs and set that field instead"
            )


def _phase(facts: RenderFacts) -> PhaseRender | None:
    return None if facts.pool is None else facts.pool.phase


def vllm_args(service: LLMService, facts: RenderFacts) -> list[str]:
    """The `vllm serve` arguments, in a fixed order, then the user's extraArgs; a
    disaggregated pool's engine also gets its tensor parallelism, its port behind the routing
    sidecar and its `--kv-transfer-config`."""
    spec = service.spec
    check_extra_args(spec.engine.extra_args)
    phase = _phase(facts)
    if phase is not None:
        _check_phase_extra_args(spec.engine.extra_args)
    model, _, _ = _model_arg(spec.model.source)
    port = BEHIND_SIDECAR_PORT if phase is not None and phase.sidecar_image else HTTP_PORT
    tp = spec.engine.tensor_parallel_size if phase is None else phase.tensor_parallel_size
    args = [
        model,
        "--served-model-name",
        spec.model.name,
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--download-dir",
        CACHE_MOUNT,
        "--tensor-parallel-size",
        str(tp),
        "--gpu-memory-utilization",
        f"{spec.engine.gpu_memory_utilization:g}",
        "--max-num-batched-tokens",
        str(facts.batching.token_budget),
        "--max-num-seqs",
        str(facts.batching.max_num_seqs),
        "--enable-chunked-prefill"
        if spec.batching.chunked_prefill
        else "--no-enable-chunked-prefill",
        "--max-model-len",
        str(spec.engine.max_model_len),
    ]
    if spec.model.revision is not None:
        args += ["--revision", spec.model.revision]
    if spec.engine.workload_metrics:
        # What the operator learns the workload and the steps' costs from (core.autoscale.plan).
        slo = service_level(spec)
        buckets = rendered_buckets(
            spec.engine.max_model_len, itl_p99_slo_s=slo.itl_p99_s, ttft_p99_slo_s=slo.ttft_p99_s
        )
        args += ["--custom-histogram-buckets", buckets_flag(buckets), "--enable-mfu-metrics"]
    if phase is not None:
        args += ["--kv-transfer-config", phase.kv_transfer_config]
    return args + list(spec.engine.extra_args)


# Flags a disaggregated pool's engine gets from spec.disaggregation, beside EMITTED_VLLM_FLAGS:
# an extraArg naming one is refused there (an aggregated service may still pass them, for a
# KV offloading connector).
PHASE_VLLM_FLAGS: dict[str, str] = {
    "--kv-transfer-config": "spec.disaggregation (each pool's role)"
}


def _check_phase_extra_args(extra_args: list[str]) -> None:
    for arg in extra_args:
        if arg.startswith("-") and _flag_name(arg) in PHASE_VLLM_FLAGS:
            raise InvalidSpec(
                f"spec.engine.extraArgs sets {_flag_name(arg)}, which the operator sets for "
                "each pool of spec.disaggregation; remove it from extraArgs"
            )


# Pod Security `restricted` (docs/reliability.md, "Least privilege"): vLLM needs no root, no
# capability and no privilege escalation; the GPU reaches it through the device plugin. What it
# does need is a writable $HOME for its caches (see _env) and /dev/shm as a memory volume, so
# the root filesystem is left writable. The user id is the image-independent 1000: the
# official vLLM image declares USER root, which runAsNonRoot alone would refuse.
POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "fsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def _env(service: LLMService) -> list[dict[str, Any]]:
    spec = service.spec
    env: dict[str, dict[str, Any]] = {}
    for var in spec.engine.env:
        if var.name in _RESERVED_ENV:
            raise InvalidSpec(
                f"spec.engine.env sets {var.name}, which the operator sets "
                "(HF_HOME is the model cache; HF_TOKEN comes from spec.model.hubTokenSecret)"
            )
        env[var.name] = {"name": var.name, "value": var.value}
    env["HF_HOME"] = {"name": "HF_HOME", "value": CACHE_MOUNT}
    # Not root: the image's home (/root) is not writable, and vLLM, torch and Triton write
    # their caches under $HOME. The cache volume is; a HOME the spec sets wins.
    env.setdefault("HOME", {"name": "HOME", "value": CACHE_MOUNT})
    secret = spec.model.hub_token_secret
    if secret is not None:
        env["HF_TOKEN"] = {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}},
        }
    return [env[name] for name in sorted(env)]


def _resources(service: LLMService, facts: RenderFacts) -> dict[str, Any]:
    engine = service.spec.engine
    gpus = str(service.spec.gpus_per_replica if facts.pool is None else facts.pool.gpus_per_replica)
    requests: dict[str, str] = {GPU_RESOURCE: gpus}
    limits: dict[str, str] = {GPU_RESOURCE: gpus}
    for target, given in ((requests, engine.resources.requests), (limits, engine.resources.limits)):
        if given.cpu is not None:
            target["cpu"] = given.cpu
        if given.memory is not None:
            target["memory"] = given.memory
    return {"requests": dict(sorted(requests.items())), "limits": dict(sorted(limits.items()))}


def _tolerations(service: LLMService) -> list[dict[str, Any]]:
    # GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule; engine pods always tolerate it.
    out = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    for tol in service.spec.accelerator.tolerations:
        entry = tol.model_dump(by_alias=True, mode="json", exclude_none=True)
        if entry not in out:
            out.append(entry)
    return out


def _probes(facts: RenderFacts, port: str) -> dict[str, Any]:
    def http(period_s: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": "/health", "port": port},
            "periodSeconds": period_s,
            "timeoutSeconds": 5,
            "failureThreshold": failures,
        }

    # The startup probe holds off the other two until the weights are loaded and the CUDA
    # graphs captured; its budget scales with the model (see plan_load_budget_s).
    return {
        "startupProbe": http(STARTUP_PERIOD_S, _startup_failures(facts)),
        "readinessProbe": http(5, 3),
        "livenessProbe": http(10, 6),
    }


def _startup_failures(facts: RenderFacts) -> int:
    return -(-facts.model_load_budget_s // STARTUP_PERIOD_S)


def progress_deadline_s(facts: RenderFacts) -> int:
    """The Deployment's progressDeadlineSeconds: the startup probe's whole window plus the
    allowance for scheduling and the image pull, so a slow but healthy model load is never
    reported as a stalled rollout (the default 600 s is shorter than an 8B model's window)."""
    return _startup_failures(facts) * STARTUP_PERIOD_S + PROGRESS_ALLOWANCE_S


def model_load_budget_s(weight_bytes: float, tensor_parallel_size: int) -> int:
    """Seconds a replica may take to become healthy: a download at an assumed 100 MiB/s plus
    five minutes for loading, compiling and capturing CUDA graphs, all doubled for slack.
    Sharding does not speed up the download, so tensor parallelism does not enter the first
    term; it adds a minute per extra rank for the distributed start."""
    download_s = weight_bytes / (100 * 2**20)
    return int(2 * (300 + download_s + 60 * (tensor_parallel_size - 1)))


def spec_hash(obj: dict[str, Any]) -> str:
    """A short, stable hash of a manifest's content."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _phase_env() -> list[dict[str, Any]]:
    """NIXL's side channel: the pod's own address (a decode engine reaches the prefill
    engine's there) and vLLM's default port."""
    return [
        {
            "name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
        },
        {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_SIDE_CHANNEL_PORT)},
    ]


def _routing_sidecar(image: str) -> dict[str, Any]:
    """The llm-d routing sidecar in front of a decode engine, as a native sidecar: it takes the
    service's port and hands the engine each request after the prefill step the endpoint picker
    chose (x-prefiller-host-port); plain HTTP, as the engine serves."""
    return {
        "name": "routing-sidecar",
        "image": image,
        "restartPolicy": "Always",
        "args": [
            f"--port={HTTP_PORT}",
            f"--vllm-port={BEHIND_SIDECAR_PORT}",
            "--secure-proxy=false",
        ],
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "securityContext": CONTAINER_SECURITY,
    }


def render_deployment(service: LLMService, facts: RenderFacts) -> dict[str, Any]:
    spec = service.spec
    phase = _phase(facts)
    _, model_volumes, model_mounts = _model_arg(spec.model.source)
    tp = spec.engine.tensor_parallel_size if phase is None else phase.tensor_parallel_size
    shm_gib = 8 if tp > 1 else 2
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib}Gi"}},
        {"name": "model-cache", "emptyDir": {}},
        *model_volumes,
    ]
    mounts = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "model-cache", "mountPath": CACHE_MOUNT},
        *model_mounts,
    ]
    behind_sidecar = phase is not None and phase.sidecar_image is not None
    port_name, port = ("engine", BEHIND_SIDECAR_PORT) if behind_sidecar else ("http", HTTP_PORT)
    ports: list[dict[str, Any]] = [{"name": port_name, "containerPort": port, "protocol": "TCP"}]
    env = _env(service)
    if phase is not None:
        ports.append({"name": "nixl", "containerPort": NIXL_SIDE_CHANNEL_PORT, "protocol": "TCP"})
        env = [*env, *_phase_env()]
    container = {
        "name": "vllm",
        "image": spec.engine.image,
        "args": vllm_args(service, facts),
        "env": env,
        "ports": ports,
        "resources": _resources(service, facts),
        "volumeMounts": mounts,
        # Keep accepting while the pod's removal reaches Services, gateways and balancers:
        # the engine gets SIGTERM (and stops accepting) only after this pause.
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_S}}},
        # vLLM writes no termination file: a crash's last log lines become the container's
        # termination message, which the status quotes (core/pod_health.py).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": CONTAINER_SECURITY,
        **_probes(facts, port_name),
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": GPU_PRODUCT_LABEL,
                                "operator": "In",
                                "values": sorted(facts.gpu_product_labels),
                            }
                        ]
                    }
                ]
            }
        }
    }
    pod_spec: dict[str, Any] = {
        **(
            {"initContainers": [_routing_sidecar(phase.sidecar_image)]}
            if phase is not None and phase.sidecar_image is not None
            else {}
        ),
        "containers": [container],
        "affinity": affinity,
        "tolerations": _tolerations(service),
        "volumes": volumes,
        "securityContext": POD_SECURITY,
        # In-flight requests get time to finish when a replica is scaled away.
        "terminationGracePeriodSeconds": 60,
    }
    pool = facts.pool
    node_selector = {**spec.accelerator.node_selector, **(pool.node_selector if pool else {})}
    if node_selector:
        pod_spec["nodeSelector"] = dict(sorted(node_selector.items()))
    pod_labels = labels(service) if pool is None else {**labels(service), POOL_LABEL: pool.label}
    if phase is not None:
        pod_labels[ROLE_LABEL] = phase.role
    template = {
        "metadata": {
            "labels": pod_labels,
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(HTTP_PORT),
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": pod_spec,
    }
    # A pool's Deployment selects its own pool's pods; the Service and the PDB select all.
    matches = selector(service) if pool is None else {**selector(service), POOL_LABEL: pool.label}
    deployment_spec: dict[str, Any] = {
        "selector": {"matchLabels": matches},
        "progressDeadlineSeconds": progress_deadline_s(facts),
        # One extra pod at a time and never fewer ready than asked: a roll keeps capacity.
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        },
        "template": template,
    }
    metadata = _metadata(service, service.metadata.name if pool is None else pool.deployment)
    if pool is not None:
        metadata["labels"] = {**metadata["labels"], POOL_LABEL: pool.label}
    metadata["annotations"] = {SPEC_HASH_ANNOTATION: spec_hash(deployment_spec)}
    replicas = spec.replicas if pool is None else pool.replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {"replicas": replicas, **deployment_spec},
    }


def render_service(service: LLMService) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(service, service.metadata.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(service),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render_pdb(service: LLMService) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(service, service.metadata.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(service)}},
    }


def render_service_monitor(service: LLMService) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _metadata(service, service.metadata.name),
        "spec": {
            "selector": {"matchLabels": selector(service)},
            "endpoints": [
                {
                    "port": "http",
                    "path": "/metrics",
                    "interval": "15s",
                    "relabelings": engine_relabelings(),
                }
            ],
        },
    }


def prometheus_label(name: str) -> str:
    """A Kubernetes label as Prometheus's discovery names it: every other character becomes _."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def engine_relabelings() -> list[dict[str, Any]]:
    """Give every engine series the `namespace` and `llmservice` labels the SLO rules group by.

    vLLM's series carry neither; the service name comes from the label on the engine pods.
    """
    return [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_namespace"],
            "targetLabel": "namespace",
        },
        {
            "action": "replace",
            "sourceLabels": [f"__meta_kubernetes_pod_label_{prometheus_label(SERVICE_LABEL)}"],
            "targetLabel": "llmservice",
        },
    ]


def render(
    service: LLMService, facts: RenderFacts, pools: Sequence[RenderFacts] = ()
) -> list[dict[str, Any]]:
    """Every object that serves `service`, in apply order: its Deployment (one per GPU pool
    when `pools` are given, in their order), the Service and the PDB over all of its engine
    pods. Raises InvalidSpec."""
    deployments = [render_deployment(service, f) for f in pools] or [
        render_deployment(service, facts)
    ]
    manifests = [*deployments, render_service(service), render_pdb(service)]
    if facts.service_monitor_served:
        manifests.append(render_service_monitor(service))
    return manifests
