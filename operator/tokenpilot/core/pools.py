"""A service on several GPU types: how its replicas are split across its pools.

`spec.replicas` (the autoscaler's, or the user's) counts replicas of the first pool's capacity:
the demand is that many times what one replica of the first pool serves within the SLOs. The
split buys that capacity:

1. Every pool starts at its `minReplicas`.
2. The pools are ranked by price per unit of capacity (price per replica-hour over requests a
   second one replica serves within the SLOs, for the planned workload); unpriced or
   unmodelled pools keep the order of the spec, which also breaks ties.
3. Walking the ranking, each pool adds replicas, up to its `maxReplicas`, until the capacity
   covers the demand. Capacity is counted for the routing the service has (`covered`): behind
   an endpoint picker the pools' capacities add; behind a Service every pod gets an equal
   share, so a mixed fleet serves as many times the slowest pool's replica as it has pods.
   Scaling down takes from the last pools of the ranking first: the dearest capacity goes first.
4. **Spill-over.** A pool whose pod stayed Unschedulable for `spillOver.after` is spilled: it
   keeps only the replicas that are Ready, and its share falls to the pools after it. After
   `spillOver.retryAfter` it is offered its share again; if its pods cannot be placed again
   it spills again.
5. **No capacity is shed before its replacement serves.** While the Ready capacity the split
   would keep is below the demand, no pool goes below the replicas it has (a spilled pool
   excepted): a move from one pool to another (back from a spill, say) drains the old pool
   only once the new one is Ready.

Capacity ratios are the step model's (core.autoscale.capacity); where a pool has none, one of
its replicas counts as one of the first pool's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokenpilot.api.llmservice import PoolState


@dataclass(frozen=True, slots=True)
class PoolOffer:
    """What one pool can give the split, and where it stands now."""

    sku: str
    requests_per_s_per_replica: float | None
    price_per_replica_hour: float | None
    min_replicas: int
    max_replicas: int
    replicas_now: int = 0
    ready_now: int = 0
    spilled: bool = False


@dataclass(frozen=True, slots=True)
class PoolShare:
    """The replicas the split gives one pool, and why."""

    sku: str
    replicas: int
    reason: str


def capacity_ratio(offer: PoolOffer, reference: PoolOffer) -> float:
    """One replica of `offer` in replicas of `reference`'s capacity (1 where either has none)."""
    mine, theirs = offer.requests_per_s_per_replica, reference.requests_per_s_per_replica
    if mine is None or theirs is None or mine <= 0 or theirs <= 0:
        return 1.0
    return mine / theirs


def cost_per_capacity(offer: PoolOffer) -> float | None:
    """Price of one replica-hour over the requests a second it serves: what a unit costs."""
    price, rate = offer.price_per_replica_hour, offer.requests_per_s_per_replica
    if price is None or rate is None or rate <= 0:
        return None
    return price / rate


def ranking(offers: Sequence[PoolOffer]) -> list[int]:
    """Indices of `offers`, cheapest capacity first; the spec's order where a pool has no
    price or no capacity model (all of them then keep the spec's order)."""
    costs = [cost_per_capacity(o) for o in offers]
    if any(c is None for c in costs):
        return list(range(len(offers)))
    return sorted(range(len(offers)), key=lambda i: (costs[i], i))


def covered(counts: Sequence[float], ratios: Sequence[float], *, equal_share: bool) -> float:
    """The capacity of `counts` replicas per pool, in first-pool replicas. A balancer that
    weighs each pod's load (an endpoint picker) adds the pools' capacities; one that gives every
    pod an equal share (a Service: a random pod per connection) holds every pod to the slowest
    pool in use, whose pods fill first."""
    if not equal_share:
        return sum(n * r for n, r in zip(counts, ratios, strict=True))
    used = [r for n, r in zip(counts, ratios, strict=True) if n > 0]
    return sum(counts) * min(used) if used else 0.0


def split(total: int, offers: Sequence[PoolOffer], *, equal_share: bool = False) -> list[PoolShare]:
    """Replicas per pool (in the order of `offers`) for `total` replicas of the first pool's
    capacity, behind a balancer that weighs load (`equal_share` False) or gives every pod an
    equal share (True); see the module doc."""
    if not offers:
        return []
    reference = offers[0]
    ratios = [capacity_ratio(o, reference) for o in offers]
    lows = [min(o.min_replicas, o.ready_now) if o.spilled else o.min_replicas for o in offers]
    highs = [min(o.max_replicas, o.ready_now) if o.spilled else o.max_replicas for o in offers]
    counts = list(lows)
    order = ranking(offers)
    for i in order:
        while covered(counts, ratios, equal_share=equal_share) + 1e-9 < total:
            if counts[i] >= highs[i]:
                break
            counts[i] += 1
    need = total - covered(counts, ratios, equal_share=equal_share)
    # The Ready capacity this split would keep: below the demand, nothing is shed yet.
    keeps = [min(o.ready_now, n) for o, n in zip(offers, counts, strict=True)]
    kept = covered(keeps, ratios, equal_share=equal_share)
    held = [False] * len(offers)
    if kept + 1e-9 < total:
        for i, offer in enumerate(offers):
            if not offer.spilled and counts[i] < offer.replicas_now:
                counts[i], held[i] = min(offer.replicas_now, offer.max_replicas), True
    place = {i: rank for rank, i in enumerate(order)}
    shares = []
    for i, offer in enumerate(offers):
        shares.append(
            PoolShare(offer.sku, counts[i], _why(offer, counts[i], place[i], held[i], need))
        )
    return shares


def _why(offer: PoolOffer, count: int, place: int, held: bool, short: float) -> str:
    cost = cost_per_capacity(offer)
    ranked = f"{_ordinal(place + 1)} in " + (
        f"price per capacity ({cost:.3g} an hour per request a second)"
        if cost is not None
        else "the spec's order"
    )
    if offer.spilled:
        return (
            f"spilled over: keeps its {count} Ready replica(s); its share runs on the pools "
            "after it"
        )
    if held:
        return f"holds {count} replica(s) until the capacity replacing them is Ready ({ranked})"
    if count == 0:
        return f"no replicas needed from it ({ranked})"
    if count >= offer.max_replicas and short > 1e-9:
        return f"{count} replica(s), its maxReplicas, and the demand is still not covered"
    if count == offer.min_replicas:
        return f"{count} replica(s), its minReplicas ({ranked})"
    return f"{count} replica(s) ({ranked})"


def _ordinal(n: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(n, f"{n}th")


@dataclass(frozen=True, slots=True)
class SpillFacts:
    """One pool's spill-over inputs, as ages in seconds: how long its oldest unplaceable pod
    has been so (None: every pod placed), the scheduler's words for it, and how long ago the
    last status recorded its spill (None: not spilled)."""

    unschedulable_for_s: float | None
    scheduler_message: str
    spilled_for_s: float | None


@dataclass(frozen=True, slots=True)
class Spill:
    """Whether a pool is spilled now, whether that began now, and what to say of it."""

    spilled: bool
    began: bool
    reason: str


def spill_state(facts: SpillFacts, *, after_s: float, retry_s: float) -> Spill:
    """A pool spills once a pod of it stayed Unschedulable `after_s`; a spill lasts `retry_s`,
    then the pool is offered its share again (and spills again if still unplaceable)."""
    spilled_for = facts.spilled_for_s
    if spilled_for is not None and spilled_for < retry_s:
        left = retry_s - spilled_for
        return Spill(True, False, f"offered its share again in {left:.0f} s")
    waited = facts.unschedulable_for_s
    if waited is None:
        return Spill(False, False, "")
    if waited >= after_s:
        words = facts.scheduler_message or "its pods cannot be placed"
        return Spill(True, True, f"a pod Unschedulable for {waited:.0f} s: {words}")
    left = after_s - waited
    return Spill(False, False, f"a pod Unschedulable; spills over in {left:.0f} s")


def pool_state(spilled: bool, replicas: int) -> PoolState:
    if spilled:
        return PoolState.SpilledOver
    return PoolState.Serving if replicas > 0 else PoolState.Idle


def summary(rows: Sequence[tuple[str, int, int]]) -> str:
    """`H100-80GB 2/2, L40S 1/1`: each pool's ready over its replicas, for kubectl get."""
    return ", ".join(f"{sku} {ready}/{replicas}" for sku, ready, replicas in rows)


def ready_in_first_pool_units(
    pod_pools: Sequence[str | None],
    pools: Sequence[tuple[str, float | None]],
    *,
    equal_share: bool = False,
) -> int:
    """Ready pods counted as spec.replicas counts them: their capacity (`covered`) in the first
    pool's replicas (`pools`: each pool's label value and requests a second per replica, in the
    spec's order), rounded down but at least one while any is Ready; a pod of an unknown pool,
    or with no capacity figure, counts one."""
    if not pools:
        return len(pod_pools)
    first = pools[0][1]
    rates = dict(pools)
    ratios = []
    for pool in pod_pools:
        rate = rates.get(pool) if pool is not None else None
        ratios.append(rate / first if rate and first else 1.0)
    units = math.floor(covered([1.0] * len(ratios), ratios, equal_share=equal_share) + 1e-9)
    # A fleet with Ready pods is never read as none: "no replica Ready" means waiting to the
    # autoscaler, and these pods serve.
    return max(units, 1) if pod_pools else 0
