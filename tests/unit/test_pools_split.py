"""The split of a service's replicas across its GPU pools, and spill-over, as pure functions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.pools import (
    PoolOffer,
    SpillFacts,
    capacity_ratio,
    ranking,
    ready_in_first_pool_units,
    spill_state,
    split,
    summary,
)

H100 = PoolOffer("H100-80GB", 10.0, 4.0, 0, 8)
L40S = PoolOffer("L40S", 4.0, 1.2, 0, 8)  # 0.3 an hour per request a second: cheaper
A100 = PoolOffer("A100-80GB", 6.0, 2.0, 0, 8)  # 0.33; H100 0.4


def test_the_cheapest_capacity_is_bought_first_and_the_demand_is_in_first_pool_replicas() -> None:
    assert ranking([H100, L40S, A100]) == [1, 2, 0]
    # 2 H100 replicas of demand = 20 requests a second = 5 L40S replicas.
    shares = split(2, [H100, L40S, A100])
    assert [s.replicas for s in shares] == [0, 5, 0]
    assert "first in price per capacity" in shares[1].reason


def test_a_full_pool_overflows_to_the_next_in_ranking() -> None:
    small_l40s = PoolOffer("L40S", 4.0, 1.2, 0, 3)
    shares = split(2, [H100, small_l40s, A100])
    # 3 L40S give 12 of 20; the remaining 8 need 2 A100 (the next cheapest), not an H100.
    assert [s.replicas for s in shares] == [0, 3, 2]


def test_unpriced_pools_keep_the_spec_order() -> None:
    h100 = PoolOffer("H100-80GB", 10.0, None, 0, 1)
    l40s = PoolOffer("L40S", 4.0, None, 0, 8)
    assert ranking([h100, l40s]) == [0, 1]
    # One H100 covers 10 of 30; 20 more need 5 L40S.
    assert [s.replicas for s in split(3, [h100, l40s])] == [1, 5]


def test_min_replicas_are_kept_and_count_toward_the_demand() -> None:
    h100 = PoolOffer("H100-80GB", 10.0, 4.0, 1, 8)
    shares = split(2, [h100, L40S])
    # The H100 floor gives 10; the other 10 on the cheaper L40S: 3 replicas.
    assert [s.replicas for s in shares] == [1, 3]
    assert "minReplicas" in shares[0].reason


def test_a_spilled_pool_keeps_only_its_ready_replicas_and_its_share_moves_on() -> None:
    h100 = PoolOffer("H100-80GB", 10.0, None, 0, 8, replicas_now=2, ready_now=0, spilled=True)
    l40s = PoolOffer("L40S", 4.0, None, 0, 8)
    shares = split(2, [h100, l40s])
    assert [s.replicas for s in shares] == [0, 5]
    assert "spilled over" in shares[0].reason


def test_capacity_is_not_shed_before_its_replacement_is_ready() -> None:
    # Back from a spill: the H100 pool is offered its share again while L40S carries the load.
    h100 = PoolOffer("H100-80GB", 10.0, None, 0, 8, replicas_now=0, ready_now=0)
    l40s = PoolOffer("L40S", 4.0, None, 0, 8, replicas_now=5, ready_now=5)
    assert [s.replicas for s in split(2, [h100, l40s])] == [2, 5]
    # Once the two H100 replicas are Ready, the L40S pool drains.
    h100_ready = PoolOffer("H100-80GB", 10.0, None, 0, 8, replicas_now=2, ready_now=2)
    assert [s.replicas for s in split(2, [h100_ready, l40s])] == [2, 0]


offers = st.builds(
    PoolOffer,
    sku=st.sampled_from(["A", "B", "C"]),
    requests_per_s_per_replica=st.one_of(st.none(), st.floats(0.1, 100)),
    price_per_replica_hour=st.one_of(st.none(), st.floats(0.1, 50)),
    min_replicas=st.integers(0, 3),
    max_replicas=st.integers(3, 20),
    replicas_now=st.integers(0, 20),
    ready_now=st.integers(0, 20),
    spilled=st.booleans(),
)


@given(st.integers(0, 60), st.lists(offers, min_size=1, max_size=3))
def test_every_split_keeps_each_pool_in_range_and_covers_what_the_pools_can(
    total: int, pools: list[PoolOffer]
) -> None:
    shares = split(total, pools)
    ratios = [capacity_ratio(p, pools[0]) for p in pools]
    for pool, share in zip(pools, shares, strict=True):
        top = min(pool.max_replicas, pool.ready_now) if pool.spilled else pool.max_replicas
        floor = min(pool.min_replicas, pool.ready_now) if pool.spilled else pool.min_replicas
        assert floor <= share.replicas <= max(top, pool.replicas_now)
    room = sum(
        (min(p.max_replicas, p.ready_now) if p.spilled else p.max_replicas) * r
        for p, r in zip(pools, ratios, strict=True)
    )
    covered = sum(s.replicas * r for s, r in zip(shares, ratios, strict=True))
    assert covered >= min(total, room) - 1e-6


def test_spill_over_waits_after_then_lasts_retry_after() -> None:
    rule = {"after_s": 60.0, "retry_s": 600.0}
    waiting = spill_state(SpillFacts(20.0, "0/3 nodes are available", None), **rule)
    assert not waiting.spilled and "spills over in 40 s" in waiting.reason
    now = spill_state(
        SpillFacts(61.0, "0/3 nodes are available: Insufficient nvidia.com/gpu", None), **rule
    )
    assert now.spilled and now.began and "Insufficient nvidia.com/gpu" in now.reason
    still = spill_state(SpillFacts(None, "", 300.0), **rule)
    assert still.spilled and not still.began and "again in 300 s" in still.reason
    offered = spill_state(SpillFacts(None, "", 601.0), **rule)
    assert not offered.spilled


def test_summary_reads_like_kubectl() -> None:
    assert summary([("H100-80GB", 2, 2), ("L40S", 0, 1)]) == "H100-80GB 2/2, L40S 0/1"


def test_ready_pods_count_in_replicas_of_the_first_pools_capacity() -> None:
    rates = [("h100-80gb", 10.0), ("l40s", 2.5)]
    # Four L40S pods serve what one H100 does; a pod of no known pool counts one.
    assert ready_in_first_pool_units(["l40s"] * 4, rates) == 1
    assert ready_in_first_pool_units(["h100-80gb", "l40s", "l40s"], rates) == 1
    assert ready_in_first_pool_units(["h100-80gb", None], rates) == 2
    assert ready_in_first_pool_units(["x", "y"], []) == 2


def test_behind_a_service_every_pod_gets_an_equal_share_so_the_slowest_pool_sets_the_pace() -> None:
    h100 = PoolOffer("H100-80GB", 10.0, 4.0, 0, 2)
    l40s = PoolOffer("L40S", 2.5, 1.2, 0, 20)
    # An endpoint picker: 2 H100 cover 2 of 3; the last one is 4 L40S (ranked after: 0.48/h
    # per request a second against 0.4).
    assert [s.replicas for s in split(3, [h100, l40s])] == [2, 4]
    # A Service: each pod serves what an L40S does once one is in the fleet, so the fleet needs
    # 12 pods in all, 10 of them L40S.
    assert [s.replicas for s in split(3, [h100, l40s], equal_share=True)] == [2, 10]
    assert (
        ready_in_first_pool_units(
            ["h100-80gb", "h100-80gb", "l40s"],
            [("h100-80gb", 10.0), ("l40s", 2.5)],
            equal_share=True,
        )
        == 1  # 0.75 of an H100's capacity, and never none while pods are Ready
    )
