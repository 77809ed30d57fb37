"""From an LLMService and the cluster's facts to everything `render` needs: the SKU, whether the
model fits it, the token budget, and the manifests.

The steps, each pure and each able to refuse with a domain error:
  1. choose the SKU (`core.sku.choose_sku`), checking with the capacity planner that the
     weights and KV cache fit at the requested tensor parallelism;
  2. choose the batching settings: integers in the spec win; `auto` asks the SLO tuner
     (`core.tuner.recommend`) for the GPU's profile, the model's shape and the spec's SLOs;
  3. render.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.capacity import plan_capacity
from tokenpilot.core.durations import parse_duration_s
from tokenpilot.core.errors import Infeasible
from tokenpilot.core.profiles import GPUProfile
from tokenpilot.core.render import RenderFacts, Tuning, model_load_budget_s, render
from tokenpilot.core.sku import NodeFacts, SkuChoice, choose_sku
from tokenpilot.core.tuner import ServiceLevel, WorkloadHints, recommend

# vLLM takes the model's own context length when --max-model-len is absent; the operator does
# not know it, so planning assumes this much (the tuner's default too).
DEFAULT_MAX_MODEL_LEN = 8192


@dataclass(frozen=True)
class Plan:
    """The outcome of planning one service: what to apply and why."""

    sku: SkuChoice[GPUProfile]
    facts: RenderFacts
    manifests: list[dict[str, Any]]


def _max_model_len(service: LLMService) -> int:
    return service.spec.engine.max_model_len or DEFAULT_MAX_MODEL_LEN


def weights_fit(service: LLMService, profile: GPUProfile) -> str | None:
    """None when the capacity planner fits the model on `profile` at the spec's tensor
    parallelism, else its explanation (needed vs available GiB, and what to change)."""
    engine = service.spec.engine
    try:
        plan_capacity(
            profile,
            service.spec.model.shape.resolve(),
            engine.tensor_parallel_size,
            engine.gpu_memory_utilization,
            _max_model_len(service),
        )
    except Infeasible as exc:
        return f"{service.spec.model.name} on {profile.name}: {exc}"
    return None


def choose_batching(service: LLMService, profile: GPUProfile) -> Tuning:
    """The batching settings: the spec's integers win; `auto` takes the SLO tuner's answer."""
    spec = service.spec
    budget, seqs = spec.batching.max_num_batched_tokens, spec.batching.max_num_seqs
    if isinstance(budget, int) and isinstance(seqs, int):
        return Tuning(
            budget, seqs, "spec", "maxNumBatchedTokens and maxNumSeqs are set in the spec"
        )
    slo = ServiceLevel(
        itl_p99_s=_duration(spec.slo.itl_p99, "spec.slo.itlP99"),
        ttft_p99_s=_duration(spec.slo.ttft_p99, "spec.slo.ttftP99"),
    )
    hints = WorkloadHints(
        max_model_len=_max_model_len(service),
        max_num_seqs=seqs if isinstance(seqs, int) else None,
        objective=spec.batching.profile,
        tensor_parallel_size=spec.engine.tensor_parallel_size,
        gpu_memory_utilization=spec.engine.gpu_memory_utilization,
    )
    rec = recommend(profile, spec.model.shape.resolve(), slo, hints)
    token_budget = budget if isinstance(budget, int) else rec.token_budget
    max_num_seqs = seqs if isinstance(seqs, int) else min(rec.max_num_seqs, token_budget)
    why = next((b for b in rec.binding if b.startswith("token_budget")), rec.message)
    if isinstance(budget, int):
        why = f"maxNumBatchedTokens is set in the spec; {rec.binding[0]}"
    if not rec.feasible:
        why = f"{rec.message}; {why}"
    evidence = "measured" if rec.measured else "datasheet"
    return Tuning(token_budget, max_num_seqs, f"profile {profile.name} ({evidence})", why)


def _duration(text: str | None, field: str) -> float | None:
    return None if text is None else parse_duration_s(text, field)


def plan(
    service: LLMService,
    *,
    nodes: Sequence[NodeFacts],
    by_name: Callable[[str], GPUProfile],
    by_product: Callable[[str], GPUProfile],
    service_monitor_served: bool,
    choose: Callable[[LLMService, GPUProfile], Tuning] = choose_batching,
) -> Plan:
    """Plan one service. Raises InvalidSpec, UnknownGPU or Infeasible."""
    spec = service.spec
    sku = choose_sku(
        spec.accelerator.sku,
        nodes=nodes,
        gpus_per_replica=spec.gpus_per_replica,
        node_selector=spec.accelerator.node_selector,
        by_product=by_product,
        by_name=by_name,
        fits=lambda candidate: weights_fit(service, candidate),
    )
    tuning = choose(service, sku.sku)
    if tuning.max_num_seqs > tuning.token_budget:
        raise Infeasible(
            f"maxNumSeqs {tuning.max_num_seqs} exceeds the token budget {tuning.token_budget}; "
            "lower batching.maxNumSeqs or raise batching.maxNumBatchedTokens"
        )
    shape = spec.model.shape.resolve()
    facts = RenderFacts(
        sku_name=sku.sku.name,
        gpu_product_labels=sku.product_labels,
        tuning=tuning,
        service_monitor_served=service_monitor_served,
        model_load_budget_s=model_load_budget_s(
            shape.weight_bytes, spec.engine.tensor_parallel_size
        ),
    )
    return Plan(sku=sku, facts=facts, manifests=render(service, facts))
