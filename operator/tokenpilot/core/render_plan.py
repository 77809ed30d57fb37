"""From an LLMService and the cluster's facts to everything `render` needs: the SKU, whether the
model fits it, the token budget, and the manifests.

The steps, each pure and each able to refuse with a domain error:
  1. choose the SKU (`core.sku.choose_sku`), checking that the weights fit at the requested
     tensor parallelism;
  2. choose the batching settings: integers in the spec win; `auto` takes vLLM's own default for
     the GPU (8192 tokens and 1024 sequences on GPUs with at least 70 GiB other than the A100,
     else 2048 and 256), which the SLO tuner replaces once it is wired in;
  3. render.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.errors import Infeasible
from tokenpilot.core.render import RenderFacts, Tuning, model_load_budget_s, render
from tokenpilot.core.sku import GpuSku, NodeFacts, SkuChoice, choose_sku

GIB = 2**30
# KV room for at least one sequence this long must remain next to the weights (vLLM refuses to
# start otherwise); it is the max model length when the spec sets one.
MIN_KV_TOKENS = 2048


@dataclass(frozen=True)
class Plan:
    """The outcome of planning one service: what to apply and why."""

    sku: SkuChoice
    facts: RenderFacts
    manifests: list[dict[str, Any]]


def weights_fit(service: LLMService, sku: GpuSku) -> str | None:
    """None when the weights and one sequence's KV fit the SKU's memory at the spec's tensor
    parallelism, else why not and what to change."""
    spec = service.spec
    shape = spec.model.shape.resolve()
    tp = spec.engine.tensor_parallel_size
    usable_gib = sku.memory_gib * spec.engine.gpu_memory_utilization
    kv_tokens = spec.engine.max_model_len or MIN_KV_TOKENS
    need_gib = (shape.weight_bytes + shape.kv_bytes_per_token * kv_tokens) / tp / GIB
    if need_gib <= usable_gib:
        return None
    min_tp = next(
        (
            n
            for n in (2, 4, 8)
            if (shape.weight_bytes + shape.kv_bytes_per_token * kv_tokens) / n / GIB <= usable_gib
        ),
        None,
    )
    fix = (
        f"set engine.tensorParallelSize to {min_tp} or more"
        if min_tp is not None
        else "choose a larger GPU or a quantised dtype"
    )
    return (
        f"{spec.model.name} needs {need_gib:.1f} GiB per GPU (weights plus KV for {kv_tokens} "
        f"tokens) at tensorParallelSize {tp}, but {sku.name} offers {usable_gib:.1f} GiB "
        f"({sku.memory_gib:g} GiB x gpuMemoryUtilization {spec.engine.gpu_memory_utilization:g})"
        f"; {fix}"
    )


def vllm_default_batching(sku: GpuSku) -> tuple[int, int]:
    """vLLM's own (token budget, max sequences) for the OpenAI server on this GPU."""
    if sku.memory_gib >= 70 and "A100" not in sku.name.upper():
        return 8192, 1024
    return 2048, 256


def choose_batching(service: LLMService, sku: GpuSku) -> Tuning:
    """The batching settings: the spec's integers win, `auto` takes vLLM's default."""
    batching = service.spec.batching
    default_budget, default_seqs = vllm_default_batching(sku)
    budget = batching.max_num_batched_tokens
    seqs = batching.max_num_seqs
    if isinstance(budget, int) and isinstance(seqs, int):
        return Tuning(
            budget, seqs, "spec", "maxNumBatchedTokens and maxNumSeqs are set in the spec"
        )
    token_budget = budget if isinstance(budget, int) else default_budget
    max_num_seqs = seqs if isinstance(seqs, int) else min(default_seqs, token_budget)
    return Tuning(
        token_budget,
        max_num_seqs,
        "vllm-default",
        f"vLLM's default for {sku.name} ({sku.memory_gib:g} GiB) fills what the spec leaves "
        "at auto, because no SLO tuner result is available",
    )


def plan(
    service: LLMService,
    *,
    nodes: Sequence[NodeFacts],
    by_name: Callable[[str], GpuSku],
    by_product: Callable[[str], GpuSku],
    service_monitor_served: bool,
    choose: Callable[[LLMService, GpuSku], Tuning] = choose_batching,
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
