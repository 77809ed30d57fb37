"""Which GPU SKU an LLMService runs on, decided from what the nodes say about themselves.

The algorithm:
  1. Keep the nodes that can take one engine pod: schedulable, matching the user's node
     selector, with at least `gpus_per_replica` allocatable nvidia.com/gpu.
  2. Group them by their nvidia.com/gpu.product label and map each product to a GPU profile;
     products no profile knows are skipped (and named, with where a profile for them goes).
  3. A named SKU must be among the groups, else the spec is Infeasible (no node can host it).
     For `auto`, drop the SKUs the model's weights do not fit, then take the one with the most
     allocatable GPUs (the most room to scale), breaking ties by memory, then by name.
Pure: nodes come in as facts, the profile lookup as a function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from tokenpilot.core.errors import Infeasible, UnknownGPU

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
AUTO = "auto"


class GpuSku(Protocol):
    """What SKU choice needs from a GPU profile."""

    @property
    def name(self) -> str: ...

    @property
    def gpu_product_labels(self) -> Sequence[str]: ...

    @property
    def memory_gib(self) -> float: ...


@dataclass(frozen=True)
class NodeFacts:
    """One node as the SKU choice sees it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable_gpus: int = 0
    unschedulable: bool = False

    @property
    def gpu_product(self) -> str | None:
        return self.labels.get(GPU_PRODUCT_LABEL)


Sku = TypeVar("Sku", bound=GpuSku)


@dataclass(frozen=True)
class SkuChoice(Generic[Sku]):
    """The chosen SKU, the product labels its pods may land on, and why."""

    sku: Sku
    product_labels: tuple[str, ...]
    num_nodes: int
    num_allocatable_gpus: int
    reason: str


def _eligible(
    nodes: Sequence[NodeFacts], gpus_per_replica: int, node_selector: Mapping[str, str]
) -> list[NodeFacts]:
    return [
        n
        for n in nodes
        if not n.unschedulable
        and n.gpu_product is not None
        and n.allocatable_gpus >= gpus_per_replica
        and all(n.labels.get(k) == v for k, v in node_selector.items())
    ]


def _describe(groups: Mapping[str, list[NodeFacts]]) -> str:
    if not groups:
        return "no schedulable GPU node"
    parts = [
        f"{name} ({len(ns)} node(s), {sum(n.allocatable_gpus for n in ns)} GPUs)"
        for name, ns in sorted(groups.items())
    ]
    return ", ".join(parts)


def choose_sku(
    requested: str,
    *,
    nodes: Sequence[NodeFacts],
    gpus_per_replica: int,
    node_selector: Mapping[str, str],
    by_product: Callable[[str], Sku],
    by_name: Callable[[str], Sku],
    fits: Callable[[Sku], str | None],
) -> SkuChoice[Sku]:
    """Choose the SKU for one service; raises UnknownGPU or Infeasible with an actionable
    message. The lookups raise UnknownGPU; `fits` returns None or why the model does not fit."""
    requested_sku = None if requested == AUTO else by_name(requested)  # UnknownGPU propagates
    eligible = _eligible(nodes, gpus_per_replica, node_selector)
    groups: dict[str, list[NodeFacts]] = {}
    profiles: dict[str, Sku] = {}
    unknown: set[str] = set()
    how_to_add = ""
    for node in eligible:
        product = node.gpu_product or ""
        try:
            sku = by_product(product)
        except UnknownGPU as exc:
            # A product no profile describes cannot be planned for; the refusal names it.
            unknown.add(product)
            how_to_add = exc.how_to_add
            continue
        profiles[sku.name] = sku
        groups.setdefault(sku.name, []).append(node)
    need = f"at least {gpus_per_replica} allocatable {GPU_RESOURCE}"
    if node_selector:
        need += " and labels " + ", ".join(f"{k}={v}" for k, v in sorted(node_selector.items()))
    offered = f"nodes offer: {_describe(groups)}"
    unprofiled = ""
    if unknown:
        names = ", ".join(sorted(unknown))
        offered += f"; unprofiled products: {names}"
        unprofiled = f"; nodes of {names} have no GPU profile: {how_to_add}"

    if requested_sku is not None:
        if requested_sku.name not in groups:
            raise Infeasible(
                f"no node can host accelerator.sku {requested_sku.name}: none has "
                f"{GPU_PRODUCT_LABEL} in {sorted(requested_sku.gpu_product_labels)} with {need}; "
                f"choose another sku or auto, or lower accelerator.gpusPerReplica{unprofiled}",
                detail=offered,
            )
        why_not = fits(requested_sku)
        if why_not is not None:
            raise Infeasible(why_not, detail=offered)
        return _choice(requested_sku, groups[requested_sku.name], "named in the spec")

    if not groups:
        if unknown:
            raise Infeasible(
                f"no GPU profile knows the nodes' {GPU_PRODUCT_LABEL} "
                f"{', '.join(sorted(unknown))}, so no SKU can be chosen; {how_to_add}",
                detail=offered,
            )
        raise Infeasible(
            f"sku auto found no schedulable GPU node with {need}; add GPU nodes, or lower "
            "accelerator.gpusPerReplica (or engine.tensorParallelSize)",
            detail=offered,
        )
    fitting: list[tuple[Sku, list[NodeFacts]]] = []
    rejected: list[tuple[Sku, str]] = []
    for name, group in groups.items():
        why_not = fits(profiles[name])
        if why_not is None:
            fitting.append((profiles[name], group))
        else:
            rejected.append((profiles[name], why_not))
    if not fitting:
        # The largest GPU is the nearest to fitting: its reason and fix stand for all.
        nearest = max(rejected, key=lambda pair: (pair[0].memory_gib, pair[0].name))[1]
        raise Infeasible(
            f"sku auto found no GPU that can host this model: {nearest}",
            detail="; ".join([*(why for _, why in rejected), offered]),
        )
    fitting.sort(
        key=lambda pair: (
            -sum(n.allocatable_gpus for n in pair[1]),
            -pair[0].memory_gib,
            pair[0].name,
        )
    )
    best, group = fitting[0]
    others = [s.name for s, _ in fitting[1:]]
    why = "auto: the fitting SKU with the most allocatable GPUs"
    if others:
        why += f" (also fitting: {', '.join(others)})"
    return _choice(best, group, why)


def _choice(sku: Sku, group: list[NodeFacts], why: str) -> SkuChoice[Sku]:
    products = tuple(sorted({n.gpu_product or "" for n in group} | set(sku.gpu_product_labels)))
    num_gpus = sum(n.allocatable_gpus for n in group)
    return SkuChoice(
        sku=sku,
        product_labels=products,
        num_nodes=len(group),
        num_allocatable_gpus=num_gpus,
        reason=f"{sku.name} {why}; {len(group)} node(s) with {num_gpus} GPUs",
    )
