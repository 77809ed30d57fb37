"""From an LLMService and the cluster's facts to everything `render` needs: the SKU, whether the
model fits it, the batching decision, and the manifests.

The steps, each pure and each able to refuse with a domain error:
  1. choose the SKU (`core.sku.choose_sku`), checking with the capacity planner that the
     weights and KV cache fit at the requested tensor parallelism: each candidate's plan
     inputs (core.plan_inputs) are resolved once;
  2. decide the batching once (`choose_batching`): integers in the spec win; `auto` asks the
     SLO tuner (`core.tuner.recommend`) with the chosen SKU's plan inputs;
  3. render.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.batching import BatchingDecision, spec_decision
from tokenpilot.core.errors import Infeasible
from tokenpilot.core.plan_inputs import PlanInputs, plan_inputs
from tokenpilot.core.render import RenderFacts, model_load_budget_s, render
from tokenpilot.core.sku import NodeFacts, SkuChoice, choose_sku
from tokenpilot.core.tuner import recommend


@dataclass(frozen=True)
class Plan:
    """The outcome of planning one service: what to apply and why."""

    sku: SkuChoice[GPUProfile]
    facts: RenderFacts
    manifests: list[dict[str, Any]]


def weights_fit(
    service: LLMService, profile: GPUProfile, planned: dict[str, PlanInputs] | None = None
) -> str | None:
    """None when the capacity planner fits the model on `profile` at the spec's tensor
    parallelism (its plan inputs kept in `planned`, by SKU), else its explanation (needed vs
    available GiB, and what to change)."""
    try:
        inputs = plan_inputs(service.spec, profile)
    except Infeasible as exc:
        return f"{service.spec.model.name} on {profile.name}: {exc}"
    if planned is not None:
        planned[profile.name] = inputs
    return None


def choose_batching(inputs: PlanInputs) -> BatchingDecision:
    """The batching decision: the spec's integers win; `auto` takes the SLO tuner's answer."""
    hints = inputs.hints
    if hints.token_budget is not None and hints.max_num_seqs is not None:
        return spec_decision(hints.token_budget, hints.max_num_seqs)
    return recommend(inputs).decision


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
    # Each candidate SKU's inputs, planned once: the fit check and the batching read the same.
    planned: dict[str, PlanInputs] = {}
    sku = choose_sku(
        spec.accelerator.sku,
        nodes=nodes,
        gpus_per_replica=spec.gpus_per_replica,
        node_selector=spec.accelerator.node_selector,
        by_product=by_product,
        by_name=by_name,
        fits=lambda candidate: weights_fit(service, candidate, planned),
    )
    inputs = planned.get(sku.sku.name) or plan_inputs(spec, sku.sku)
    facts = RenderFacts(
        sku_name=sku.sku.name,
        gpu_product_labels=sku.product_labels,
        batching=choose_batching(inputs),
        service_monitor_served=service_monitor_served,
        model_load_budget_s=model_load_budget_s(
            inputs.shape.weight_bytes, inputs.hints.tensor_parallel_size
        ),
    )
    return Plan(sku=sku, facts=facts, manifests=render(service, facts))
