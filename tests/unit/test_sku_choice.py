"""SKU choice from node facts: named SKUs, `auto`, and the Infeasible cases."""

from __future__ import annotations

import pytest
from _llms import CLUSTER, by_name, by_product, node, service
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.errors import Infeasible, UnknownGPU
from tokenpilot.core.render_plan import weights_fit
from tokenpilot.core.sku import GPU_PRODUCT_LABEL, NodeFacts, choose_sku


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
        ("auto", 16, None, "found no schedulable GPU node"),
        ("auto", 1, {"zone": "mars"}, "labels zone=mars"),
    ],
)
def test_infeasible_names_the_fix(requested, gpus, selector, needle) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Infeasible, match=needle):
        choose(requested, gpus=gpus, selector=selector)


def test_unknown_sku() -> None:
    with pytest.raises(UnknownGPU, match="known: "):
        choose("B200")


def test_weights_do_not_fit_at_tp1() -> None:
    big = service(model__shape={"preset": "llama-3.1-70b"}, accelerator={"sku": "H100-80GB"})
    with pytest.raises(Infeasible, match="set tensorParallelSize to 2"):
        choose("H100-80GB", svc=big)


def test_unprofiled_products_are_named_with_where_their_profile_goes() -> None:
    nodes = (node("x", "NVIDIA-Mystery", 8),)
    with pytest.raises(Infeasible, match="NVIDIA-Mystery, so no SKU can be chosen; add") as err:
        choose("auto", nodes=nodes)
    detail = err.value.detail
    assert detail is not None and "unprofiled products: NVIDIA-Mystery" in detail


PRODUCTS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "NVIDIA-L4", "NVIDIA-Mystery", None]


@given(
    nodes=st.lists(
        st.tuples(st.sampled_from(PRODUCTS), st.integers(0, 8), st.booleans()), max_size=8
    ),
    gpus=st.sampled_from([1, 2, 4, 8]),
)
def test_auto_only_ever_picks_nodes_that_can_host_a_replica(
    nodes: list[tuple[str | None, int, bool]], gpus: int
) -> None:
    facts = tuple(
        NodeFacts(
            name=f"n{i}",
            labels={GPU_PRODUCT_LABEL: product} if product else {},
            allocatable_gpus=count,
            unschedulable=cordoned,
        )
        for i, (product, count, cordoned) in enumerate(nodes)
    )
    try:
        choice = choose("auto", nodes=facts, gpus=gpus)
    except Infeasible as exc:
        assert exc.detail is not None and "nodes offer" in exc.detail
        return
    hosts = [
        n
        for n in facts
        if not n.unschedulable
        and n.allocatable_gpus >= gpus
        and n.gpu_product in choice.sku.gpu_product_labels
    ]
    assert len(hosts) == choice.num_nodes >= 1
    assert choice.num_allocatable_gpus == sum(n.allocatable_gpus for n in hosts)
