"""Autoscaler shards across replicas (core/shards.py), run against a Lease store that keeps the
API server's rules (optimistic concurrency on every write): replicas that start at different
times, die and come back. What a user would notice: every service is evaluated by exactly one
replica (no shard is ever writable by two at once), none is left without one for long, and
once every replica is up the shards are shared evenly."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpilot.core.lease import LeaseRecord, LeaseTiming, Sighting, Verdict, choose, sight
from tokenpilot.core.shards import (
    ALLOWED_SHARDS,
    ShardSeen,
    plan,
    shards_problem,
    share,
    work_shard,
)

TIMING = LeaseTiming()
PERIOD_S = TIMING.retry_period_s
ORPHAN_AFTER_S = 2 * TIMING.lease_duration_s


@dataclass
class Stored:
    holder: str = ""
    renewed: int = 0  # renewTime, as a counter: only its change matters
    duration_s: float = TIMING.lease_duration_s
    version: int = 0


@dataclass
class Store:
    leases: dict[int, Stored]
    wants: dict[int, Stored] = field(default_factory=dict)


@dataclass
class Replica:
    identity: str
    sightings: dict[int, Sighting] = field(default_factory=dict)
    missing_since: dict[int, float] = field(default_factory=dict)
    wants_seen: dict[int, Sighting] = field(default_factory=dict)
    fences: dict[int, float] = field(default_factory=dict)  # shard -> renew sent at
    asking: int | None = None

    def open(self, now_s: float) -> set[int]:
        return {k for k, at in self.fences.items() if now_s < at + TIMING.renew_deadline_s}


def record(stored: Stored) -> LeaseRecord:
    return LeaseRecord(
        stored.holder, stored.duration_s, str(stored.renewed), 0, str(stored.version)
    )


def period(replica: Replica, store: Store, shards: int, replicas: int, now_s: float) -> None:
    """One retry period of one replica, as adapters/kube/shards.ShardKeeper runs it."""
    fair = share(shards, replicas)
    over = len(replica.open(now_s)) > fair
    seen, read_versions = [], {}
    for k in range(shards):
        stored = store.leases.get(k)
        if stored is None:
            since = replica.missing_since.setdefault(k, now_s)
            lease = Sighting(LeaseRecord("", TIMING.lease_duration_s, "", 0, ""), since)
            read_versions[k] = None
        else:
            replica.missing_since.pop(k, None)
            lease = sight(replica.sightings.get(k), record(stored), now_s)
            replica.sightings[k] = lease
            read_versions[k] = stored.version
        want = None
        if over and k in replica.open(now_s) and k in store.wants:
            want = sight(replica.wants_seen.get(k), record(store.wants[k]), now_s)
            replica.wants_seen[k] = want
        seen.append(ShardSeen(k, lease, want))
    moves = plan(replica.identity, seen, fair, now_s, ORPHAN_AFTER_S)
    for k in moves.give_up:
        replica.fences.pop(k, None)  # the fence closes first
        stored = store.leases[k]
        if stored.holder == replica.identity:
            stored.holder, stored.duration_s = "", 1.0
            stored.version += 1
    for k in moves.renew | moves.take:
        stored = store.leases.get(k)
        current = None if stored is None else stored.version
        if current != read_versions[k]:
            continue  # 409: someone wrote since the read
        sighting = replica.sightings.get(k) if stored is not None else None
        verdict = choose(sighting, replica.identity, now_s).verdict
        if verdict is Verdict.WAIT:
            continue
        if stored is None:
            stored = store.leases[k] = Stored()
        stored.holder, stored.duration_s = replica.identity, TIMING.lease_duration_s
        stored.renewed += 1
        stored.version += 1
        replica.fences[k] = now_s
    if replica.asking is not None and replica.asking != moves.want:
        store.wants[replica.asking].holder = ""
        store.wants[replica.asking].version += 1
    replica.asking = moves.want
    if moves.want is not None:
        want = store.wants.setdefault(moves.want, Stored())
        want.holder = replica.identity
        want.renewed += 1
        want.version += 1


def simulate(
    shards: int,
    replicas: int,
    starts: list[int],
    death: tuple[int, int, int] | None,
    seed: int,
    *,
    pause: bool = False,
) -> None:
    """Run `replicas` replicas (the i-th from period starts[i]); `death` = (which, at, back
    after) kills one and brings it back as a new candidate, or with `pause` freezes it for
    that long (SIGSTOP: it still believes what it believed). Checks safety every period and,
    long after the last event, that every shard is held and the shares are even."""
    rng = random.Random(seed)
    store = Store(leases={})
    alive: dict[int, Replica] = {}
    last_event = max(starts) + (0 if death is None else death[1] + death[2])
    restarts = 0
    for p in range(last_event + 60):
        now_s = p * PERIOD_S
        for i, start in enumerate(starts):
            if p == start:
                alive[i] = Replica(f"replica-{i}")
        frozen = None
        if death is not None:
            which, at, back = death
            if pause:
                frozen = alive.get(which) if at <= p < at + back else None
            else:
                if p == at and which in alive:
                    del alive[which]
                if p == at + back:
                    restarts += 1
                    alive[which] = Replica(f"replica-{which}-again-{restarts}")
        order = [r for r in alive.values() if r is not frozen]
        rng.shuffle(order)
        for replica in order:
            period(replica, store, shards, replicas, now_s)
        # Never two replicas that may write for one shard.
        for k in range(shards):
            writers = [r.identity for r in alive.values() if k in r.open(now_s)]
            assert len(writers) <= 1, f"shard {k} writable by {writers} at {now_s} s"
    now_s = (last_event + 59) * PERIOD_S
    held = {k: r.identity for r in alive.values() for k in r.open(now_s)}
    assert sorted(held) == list(range(shards)), f"unheld shards at the end: {held}"
    counts = [len(r.open(now_s)) for r in alive.values()]
    assert max(counts) <= share(shards, replicas), f"uneven shares {counts}"


@settings(max_examples=60, deadline=None)
@given(
    shards=st.sampled_from([s for s in ALLOWED_SHARDS if s > 1]),
    replicas=st.integers(1, 4),
    data=st.data(),
)
def test_shards_are_held_once_and_shared_evenly(
    shards: int, replicas: int, data: st.DataObject
) -> None:
    starts = data.draw(st.lists(st.integers(0, 20), min_size=replicas, max_size=replicas))
    death = data.draw(
        st.none() | st.tuples(st.integers(0, replicas - 1), st.integers(25, 60), st.integers(1, 40))
    )
    pause = data.draw(st.booleans())
    simulate(shards, replicas, starts, death, data.draw(st.integers(0, 2**16)), pause=pause)


def test_a_dead_replicas_shards_are_taken_within_two_lease_durations() -> None:
    # Two replicas, four shards; replica 0 dies at 100 s and stays down.
    store = Store(leases={})
    a, b = Replica("a"), Replica("b")
    for p in range(50):
        for r in (a, b):
            period(r, store, 4, 2, p * PERIOD_S)
    assert len(a.open(98.0)) == len(b.open(98.0)) == 2
    lost = a.open(98.0)
    taken_at = None
    for p in range(50, 100):
        period(b, store, 4, 2, p * PERIOD_S)
        if lost <= b.open(p * PERIOD_S) and taken_at is None:
            taken_at = p * PERIOD_S
    assert taken_at is not None
    # Orphans: free after the lease duration, taken over the share after two of them.
    assert taken_at - 98.0 <= ORPHAN_AFTER_S + TIMING.lease_duration_s + 2 * PERIOD_S


def test_work_shards_follow_memory_shards() -> None:
    assert [work_shard(m, 4) for m in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert shards_problem(3, 2) == (
        "--autoscaler-shards 3: must divide the 16 memory shards (one of 1, 2, 4, 8, 16)"
    )
    assert shards_problem(4, 0) == "--autoscaler-replicas 0: must be at least 1"
    assert shards_problem(4, 2) is None
