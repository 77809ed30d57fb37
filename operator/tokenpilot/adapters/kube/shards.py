"""The autoscaler shards this replica holds, on their Leases (the rules: core/shards.py).

Shard `k` is the Lease `<lease>-shard-<k>` in the operator's namespace, beside the operator's
own Lease; a replica asks for a shard through `<lease>-shard-<k>-want`, a Lease that names the
asker and is renewed while it asks. Every retry period a thread reads every shard's Lease (and,
while this replica holds more than its share, the want Leases of its shards), asks `plan`,
and carries the moves out: give up, renew, take, ask. Each shard has its own LeaseElector and
so its own write fence: the autoscaler writes a service's scale, status and Events, and its
memory ConfigMap, through the client of the service's shard (`client_for`), and a shard whose
renewals failed for the renew deadline refuses them, as the operator's Lease does for the
reconciler. Losing a shard does not end the process (the operator's own Lease does): the
evaluator drops that shard's services at its next round, and the replica that takes the shard
resumes them from their memory.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tokenpilot.adapters.clock import SYSTEM_CLOCK, Clock
from tokenpilot.adapters.kube.client import Conflict, KubeClient, KubeError, NotFound
from tokenpilot.adapters.kube.lease import LeaseElector, LeaseName, lease_record, micro_time
from tokenpilot.core.lease import LeaseRecord, LeaseTiming, Sighting, sight
from tokenpilot.core.shards import Moves, ShardSeen, plan, share, work_shard

log = logging.getLogger("tokenpilot.shards")


def shard_lease(lease: LeaseName, shard: int) -> LeaseName:
    return LeaseName(lease.namespace, f"{lease.name}-shard-{shard}")


def want_lease(lease: LeaseName, shard: int) -> LeaseName:
    return LeaseName(lease.namespace, f"{lease.name}-shard-{shard}-want")


@dataclass
class ShardKeeper:
    """This replica's shards of `shards`, when `replicas` replicas share them."""

    client: KubeClient  # unguarded: the Leases are how the fences are kept
    lease: LeaseName
    identity: str
    shards: int
    replicas: int
    timing: LeaseTiming = field(default_factory=LeaseTiming)
    clock: Clock = SYSTEM_CLOCK
    electors: list[LeaseElector] = field(init=False)
    _missing_since: dict[int, float] = field(default_factory=dict, init=False)
    _wants_seen: dict[int, Sighting] = field(default_factory=dict, init=False)
    _asking: int | None = field(default=None, init=False)
    _clients: dict[int, KubeClient] = field(default_factory=dict, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.electors = [
            LeaseElector(
                self.client,
                shard_lease(self.lease, k),
                self.identity,
                self.timing,
                clock=self.clock,
                on_lost=self._lost,
            )
            for k in range(self.shards)
        ]
        for k, elector in enumerate(self.electors):
            guard = elector.guard.check
            self._clients[k] = KubeClient(self.client.api, self.client.timeout_s, guard)

    # What the evaluator asks.

    def held(self) -> frozenset[int]:
        """The shards whose fence is open now."""
        return frozenset(k for k, e in enumerate(self.electors) if e.guard.allows())

    def shard_of_memory(self, memory_shard: int) -> int:
        return work_shard(memory_shard, self.shards)

    def client_for(self, shard: int) -> KubeClient:
        """A client whose writes pass only while this replica holds `shard`."""
        return self._clients[shard]

    # The thread.

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="autoscaler-shards", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and release every shard held, so the others take them at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timing.retry_period_s + self.client.timeout_s)
        for k in self.held():
            self.electors[k].give_up()
        self._ask(None)

    def _run(self) -> None:
        while True:
            try:
                self.step()
            except Exception:
                log.exception("autoscaler shards: one period failed; trying again")
            if self._stop.wait(self.timing.retry_period_s):
                return

    def step(self) -> Moves:
        """One period: read, plan, carry out."""
        seen = self._read()
        fair = share(self.shards, self.replicas)
        moves = plan(
            self.identity,
            seen,
            fair,
            self.clock.monotonic_s(),
            orphan_after_s=2 * self.timing.lease_duration_s,
        )
        for k in sorted(moves.give_up):
            log.info("%s gives shard %d to the replica that asked for it", self.identity, k)
            self.electors[k].give_up()
        for k in sorted(moves.renew | moves.take):
            if self.electors[k].act() and k in moves.take:
                log.info("%s holds shard %d of %d", self.identity, k, self.shards)
        self._ask(moves.want)
        return moves

    def _read(self) -> list[ShardSeen]:
        now_s = self.clock.monotonic_s()
        mine = self.held()
        over = len(mine) > share(self.shards, self.replicas)
        seen = []
        for k, elector in enumerate(self.electors):
            lease = elector.read()
            if elector.read_failed:
                continue  # not renewed this period; the fence holds until its deadline
            if lease is None:
                since = self._missing_since.setdefault(k, now_s)
                lease = Sighting(
                    LeaseRecord("", self.timing.lease_duration_s, "", 0, ""), first_seen_s=since
                )
            else:
                self._missing_since.pop(k, None)
            want = self._read_want(k) if over and k in mine else None
            seen.append(ShardSeen(k, lease, want))
        return seen

    def _read_want(self, shard: int) -> Sighting | None:
        try:
            body = self.client.get(want_lease(self.lease, shard).path)
        except KubeError:
            return None
        if body is None:
            self._wants_seen.pop(shard, None)
            return None
        seen = sight(self._wants_seen.get(shard), lease_record(body), self.clock.monotonic_s())
        self._wants_seen[shard] = seen
        return seen

    def _ask(self, shard: int | None) -> None:
        """Ask for `shard` (renew the ask), or stop asking for the one asked for before."""
        if self._asking is not None and self._asking != shard:
            self._write_want(self._asking, holder="")
        self._asking = shard
        if shard is not None:
            self._write_want(shard, holder=self.identity)

    def _write_want(self, shard: int, *, holder: str) -> None:
        name = want_lease(self.lease, shard)
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name.name, "namespace": name.namespace},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": max(1, round(self.timing.lease_duration_s)),
                "renewTime": micro_time(datetime.now(UTC)),
            },
        }
        try:
            current = self.client.get(name.path)
            if current is None:
                if holder:
                    self.client.request("POST", name.path.rsplit("/", 1)[0], body=body)
                return
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.client.request("PUT", name.path, body=body)
        except (Conflict, NotFound):
            return  # another asker wrote first; it asks for the same shard
        except KubeError as exc:
            log.warning("shard %d: cannot ask for it: %s", shard, exc)

    def _lost(self, reason: str) -> None:
        # The fence has closed: the guard refuses the write; the next round drops the shard.
        log.warning("autoscaler shard lost: %s", reason)
