"""From an LLMService and the cluster's facts to everything `render` needs: the SKU, whether the
model fits it, the batching decision, and the manifests.

The steps, each pure and each able to refuse with a domain error:
  1. choose the SKU (`core.sku.choose_sku`), checking with the capacity planner that the
     weights and KV cache fit at the requested tensor parallelism;
  2. decide the batching once (`choose_batching`): integers in the spec win; `auto` asks the
     SLO tuner (`core.tuner.recommend`) for the GPU's profile, the model's shape and the SLOs;
  3. render.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.batching import BatchingDecision, spec_decision
from tokenpilot.core.capacity import plan_capacity
from tokenpilot.core.durations import parse_duration_s
from tokenpilot.core.errors import Infeasible
from tokenpilot.core.profiles import GPUProfile
from tokenpilot.core.render import RenderFacts, model_load_budget_s, render
from tokenpilot.core.sku import NodeFacts, SkuChoice, choose_sku
from tokenpilot.core.tuner import ServiceLevel, WorkloadHints, recommend


@dataclass(frozen=True)
class Plan:
    """The outcome of planning one service: what to apply and why."""

    sku: SkuChoice[GPUProfile]
    facts: RenderFacts
    manifests: list[dict[str, Any]]


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
            engine.max_model_len,
        )
    except Infeasible as exc:
        return f"{service.spec.model.name} on {profile.name}: {exc}"
    return None


def choose_batching(service: LLMService, profile: GPUProfile) -> BatchingDecision:
    """The batching decision: the spec's integers win; `auto` takes the SLO tuner's answer."""
    spec = service.spec
    budget, seqs = spec.batching.max_num_batched_tokens, spec.batching.max_num_seqs
    if isinstance(budget, int) and isinstance(seqs, int):
        return spec_decision(budget, seqs)
    slo = ServiceLevel(
        itl_p99_s=_duration(spec.slo.itl_p99, "spec.slo.itlP99"),
        ttft_p99_s=_duration(spec.slo.ttft_p99, "spec.slo.ttftP99"),
    )
    hints = WorkloadHints(
        max_model_len=spec.engine.max_model_len,
        max_num_seqs=seqs if isinstance(seqs, int) else None,
        token_budget=budget if isinstance(budget, int) else None,
        objective=spec.batching.profile,
        tensor_parallel_size=spec.engine.tensor_parallel_size,
        gpu_memory_utilization=spec.engine.gpu_memory_utilization,
    )
    return recommend(profile, spec.model.shape.resolve(), slo, hints).decision


def _duration(text: str | None, field: str) -> float | None:
    return None if text is None else parse_duration_s(text, field)


def plan(
    service: LLMService,
    *,
    nodes: Sequence[NodeFacts],
    by_name: Callable[[str], GPUProfile],
    by_product: Callable[[str], GPUProfile],
    service_monitor_served: bool,
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
    shape = spec.model.shape.resolve()
    facts = RenderFacts(
        sku_name=sku.sku.name,
        gpu_product_labels=sku.product_labels,
        batching=choose_batching(service, sku.sku),
        service_monitor_served=service_monitor_served,
        model_load_budget_s=model_load_budget_s(
            shape.weight_bytes, spec.engine.tensor_parallel_size
        ),
    )
    return Plan(sku=sku, facts=facts, manifests=render(service, facts))
