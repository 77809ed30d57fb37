"""The autoscaler's services split across operator replicas: shards, each on a Lease of its own,
as decisions (no I/O, no clock; adapters/kube/shards.py reads and writes the Leases).

A service's shard follows its memory: the memory of each service is kept in one of
`MEMORY_SHARDS` ConfigMaps by a hash of its namespace and name
(adapters/kube/autoscaler_memory.shard_of), and work shard `k` of `shards` holds the services
of the memory shards `m` with `m mod shards == k`. So `shards` divides `MEMORY_SHARDS`, and a
replica that holds a shard reads and writes whole memory ConfigMaps, never another replica's.

Every retry period each replica reads every shard's Lease and `plan` says what to do with them,
by the rules of leader election (core.lease) plus a share:

    share    ceil(shards / replicas): what each replica holds when all are up
    renew    every shard it holds, unless it gives one up below
    take     a free shard (released, expired, or never created) while it holds fewer than
             its share; over its share, only an orphan: free for `orphan_after_s` (two lease
             durations), so no replica under its share was there to take it
    want     under its share with nothing free: ask a replica over its share for one shard
             (the shard's want Lease names the asker)
    give up  over its share: release a shard that another replica asks for

A replica that dies leaves its shards to expire; the others take them as orphans. When it
comes back (as a new candidate), it asks, and the replicas over their share give one shard
each a period until the shares are even again.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tokenpilot.core.lease import Sighting, Verdict, choose

MEMORY_SHARDS = 16
ALLOWED_SHARDS = tuple(n for n in range(1, MEMORY_SHARDS + 1) if MEMORY_SHARDS % n == 0)


def work_shard(memory_shard: int, shards: int) -> int:
    """The work shard of the services whose memory is in `memory_shard`."""
    return memory_shard % shards


def share(shards: int, replicas: int) -> int:
    """How many shards one replica holds when `replicas` are up."""
    return math.ceil(shards / max(1, replicas))


def shards_problem(shards: int, replicas: int) -> str | None:
    """What is wrong with the flags, naming them, or None."""
    if shards not in ALLOWED_SHARDS:
        allowed = ", ".join(map(str, ALLOWED_SHARDS))
        return (
            f"--autoscaler-shards {shards}: must divide the {MEMORY_SHARDS} memory shards "
            f"(one of {allowed})"
        )
    if replicas < 1:
        return f"--autoscaler-replicas {replicas}: must be at least 1"
    return None


@dataclass(frozen=True)
class ShardSeen:
    """One shard as this replica last read it: its Lease (a missing one as released, first
    seen when found missing) and its want Lease (None when there is none)."""

    shard: int
    lease: Sighting
    want: Sighting | None = None


@dataclass(frozen=True)
class Moves:
    renew: frozenset[int]
    take: frozenset[int]
    give_up: frozenset[int]
    want: int | None  # the shard to ask for, if any

    @property
    def holding(self) -> frozenset[int]:
        """What this replica holds if every move succeeds."""
        return self.renew | self.take


def _holder(seen: ShardSeen, identity: str, now_s: float) -> str | None:
    """Who holds the shard now, or None when it is free to take."""
    verdict = choose(seen.lease, identity, now_s).verdict
    if verdict in (Verdict.RENEW, Verdict.WAIT):
        return seen.lease.record.holder
    return None


def _wanted(seen: ShardSeen, identity: str, now_s: float) -> bool:
    """Another replica asked for the shard, and has asked again within its want's duration."""
    want = seen.want
    if want is None or not want.record.holder or want.record.holder == identity:
        return False
    return now_s - want.first_seen_s < want.record.lease_duration_s


def plan(
    identity: str, seen: Sequence[ShardSeen], share: int, now_s: float, orphan_after_s: float
) -> Moves:
    """What this replica does with each shard this period (see the module's rules)."""
    holders = {s.shard: _holder(s, identity, now_s) for s in seen}
    mine = sorted(k for k, holder in holders.items() if holder == identity)
    over = len(mine) - share
    give_up: set[int] = set()
    if over > 0:
        asked = [s.shard for s in seen if s.shard in mine and _wanted(s, identity, now_s)]
        give_up = set(asked[:over])
    take: set[int] = set()
    for s in sorted(seen, key=lambda s: s.shard):
        if holders[s.shard] is not None:
            continue
        holding = len(mine) - len(give_up) + len(take)
        if holding < share or now_s - s.lease.first_seen_s >= orphan_after_s:
            take.add(s.shard)
    want = None
    if len(mine) - len(give_up) + len(take) < share:
        counts = Counter(h for h in holders.values() if h is not None and h != identity)
        richest = [h for h, n in counts.most_common() if n > share]
        if richest:
            want = min(k for k, h in holders.items() if h == richest[0])
    return Moves(
        renew=frozenset(mine) - give_up,
        take=frozenset(take),
        give_up=frozenset(give_up),
        want=want,
    )
