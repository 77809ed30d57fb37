"""SKU choice from node facts: named SKUs, `auto`, and the Infeasible cases."""

from __future__ import annotations

import pytest
from _llms import CLUSTER, by_name, by_product, node, service

from tokenpilot.core.errors import Infeasible, UnknownGPU
from tokenpilot.core.render_plan import weights_fit
from tokenpilot.core.sku import choose_sku


def choose(requested: str, nodes=CLUSTER, gpus: int = 1, selector=None, svc=None):  # type: ignore[no-untyped-def]
    svc = svc or service()
    return choose_sku(
        requested,
        nodes=nodes,
        gpus_per_replica=gpus,
        node_selector=selector or {},
        by_product=by_product,
        by_name=by_name,
        fits=lambda sku: weights_fit(svc, sku),
    )


@pytest.mark.parametrize(
    ("requested", "gpus", "expected", "num_nodes"),
    [
        ("auto", 1, "H100-80GB", 2),  # most allocatable GPUs
        ("L40S", 1, "L40S", 1),
        ("H100-80GB", 8, "H100-80GB", 2),
        ("auto", 8, "H100-80GB", 2),
    ],
)
def test_choice(requested: str, gpus: int, expected: str, num_nodes: int) -> None:
    choice = choose(requested, gpus=gpus)
    assert choice.sku.name == expected
    assert choice.num_nodes == num_nodes
    assert expected in choice.reason


def test_auto_skips_gpus_the_model_does_not_fit() -> None:
    big = service(model__shape={"preset": "llama-3.1-70b"}, engine={"tensorParallelSize": 4})
    nodes = (node("l4", "NVIDIA-L4", 8), node("l40s", "NVIDIA-L40S", 4))
    assert choose("auto", nodes=nodes, gpus=4, svc=big).sku.name == "L40S"


@pytest.mark.parametrize(
    ("requested", "gpus", "selector", "needle"),
    [
        ("L40S", 8, None, "no node can host accelerator.sku L40S"),
        ("A100-40GB", 1, None, "no node can host accelerator.sku A100-40GB"),
        ("auto", 16, None, "found no GPU"),
        ("auto", 1, {"zone": "mars"}, "labels zone=mars"),
    ],
)
def test_infeasible_names_the_fix(requested, gpus, selector, needle) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Infeasible, match=needle):
        choose(requested, gpus=gpus, selector=selector)


def test_unknown_sku() -> None:
    with pytest.raises(UnknownGPU, match="known GPUs: "):
        choose("B200")


def test_weights_do_not_fit_at_tp1() -> None:
    big = service(model__shape={"preset": "llama-3.1-70b"}, accelerator={"sku": "H100-80GB"})
    with pytest.raises(Infeasible, match="set tensorParallelSize to 2"):
        choose("H100-80GB", svc=big)


def test_unprofiled_products_are_named() -> None:
    nodes = (node("x", "NVIDIA-Mystery", 8),)
    with pytest.raises(Infeasible, match="unprofiled products: NVIDIA-Mystery"):
        choose("auto", nodes=nodes)
