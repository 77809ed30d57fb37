"""Leader election on a `coordination.k8s.io/v1` Lease, and the write guard it keeps.

`LeaseElector` reads and writes one Lease with its own client (so a busy handler pool never
delays a renew) and asks `core.lease` what to do. While it leads, a thread renews every retry
period; each renew that succeeds moves the `WriteGuard`'s fence. Every writer of the operator
consults the guard just before it sends a write: `KubeClient.request` for the reconciler and
the autoscaler, and kopf's own HTTP session (see `handlers/operator.py`). Once the fence has
passed (renewals failed for the renew deadline, or the process was paused longer than that:
its monotonic clock kept running), the guard refuses the write and calls `on_lost`, which by
default ends the process so that it restarts as a standby with no state left from leading.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

from tokenpilot.adapters.clock import SYSTEM_CLOCK, Clock
from tokenpilot.adapters.kube.client import Conflict, KubeClient, KubeError, NotFound
from tokenpilot.core.lease import Fence, LeaseRecord, LeaseTiming, Sighting, Verdict, choose, sight

log = logging.getLogger("tokenpilot.lease")

LEASE_LOST_EXIT = 3  # the exit status of a replica that stopped leading
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Fenced(KubeError):
    """A write refused because this replica may no longer be the leader."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


def exit_lost(reason: str) -> NoReturn:
    """Stop at once: no handler, cleanup or kopf shutdown step gets to write after this."""
    log.critical("stopped leading: %s; exiting so this replica restarts as a standby", reason)
    logging.shutdown()
    os._exit(LEASE_LOST_EXIT)


class WriteGuard:
    """Open while this replica's fence holds; consulted before every write."""

    def __init__(
        self, identity: str, clock: Clock, on_lost: Callable[[str], None] = exit_lost
    ) -> None:
        self.identity = identity
        self._clock = clock
        self._on_lost = on_lost
        self._fence: Fence | None = None  # None: never led, nothing may be written
        self._lock = threading.Lock()

    def extend(self, fence: Fence) -> None:
        with self._lock:
            self._fence = fence

    def close(self) -> None:
        """No write may go out from now on (until a renew extends the fence again)."""
        with self._lock:
            self._fence = None

    def allows(self) -> bool:
        fence = self._fence
        return fence is not None and fence.allows(self._clock.monotonic_s())

    def check(self, method: str, what: str) -> None:
        """Raise `Fenced` (after calling on_lost) unless a write may go out now."""
        if method.upper() in READ_METHODS or self.allows():
            return
        fence = self._fence
        late = (
            "it never led"
            if fence is None
            else f"its last renew is {self._clock.monotonic_s() - fence.renewed_s:.1f} s old "
            f"(renew deadline {fence.renew_deadline_s:g} s)"
        )
        reason = f"{self.identity} refused {method} {what}: {late}"
        self._on_lost(reason)
        raise Fenced(reason)


def micro_time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_record(body: dict[str, Any]) -> LeaseRecord:
    spec = body.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_duration_s=float(spec.get("leaseDurationSeconds") or 0),
        renew_time=str(spec.get("renewTime") or ""),
        transitions=int(spec.get("leaseTransitions") or 0),
        version=str(body["metadata"]["resourceVersion"]),
    )


@dataclass(frozen=True)
class LeaseName:
    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str) -> LeaseName:
        namespace, slash, name = text.partition("/")
        if not slash or not namespace or not name:
            raise ValueError(f"--leader-election-lease {text!r}: expected NAMESPACE/NAME")
        return cls(namespace, name)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"


class LeaseElector:
    """One candidate for one Lease."""

    def __init__(
        self,
        client: KubeClient,
        lease: LeaseName,
        identity: str,
        timing: LeaseTiming,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_lost: Callable[[str], None] = exit_lost,
    ) -> None:
        self.client = client
        self.lease = lease
        self.identity = identity
        self.timing = timing
        self.clock = clock
        self.on_lost = on_lost
        self.guard = WriteGuard(identity, clock, on_lost)
        self._sighting: Sighting | None = None
        # The last `read`: when it was sent, what it found, and whether it failed.
        self._sent_s = 0.0
        self._body_read: dict[str, Any] | None = None
        self._read_failed = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- one attempt ---------------------------------------------------------------------

    def _body(self, record: LeaseRecord | None, taking: bool) -> dict[str, Any]:
        now = micro_time(datetime.now(UTC))
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.timing.lease_duration_s)),
            "renewTime": now,
            "acquireTime": now,
            "leaseTransitions": 0,
        }
        metadata: dict[str, Any] = {"name": self.lease.name, "namespace": self.lease.namespace}
        if record is not None:
            metadata["resourceVersion"] = record.version  # optimistic concurrency
            spec["leaseTransitions"] = record.transitions + (1 if taking else 0)
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def try_once(self) -> bool:
        """Read the Lease and create, renew or take it if we may; True while we lead."""
        self.read()
        return self.act()

    def read(self) -> Sighting | None:
        """GET the Lease: how this replica sees it now (None: there is none, or it cannot be
        read); `act` then decides on this reading."""
        self._sent_s = self.clock.monotonic_s()
        try:
            body = self.client.get(self.lease.path)
        except KubeError as exc:
            log.warning("lease %s: %s", self.lease.path, exc)
            self._read_failed = True
            return None
        self._read_failed = False
        self._body_read = body
        if body is None:
            return None
        self._sighting = sight(self._sighting, lease_record(body), self.clock.monotonic_s())
        return self._sighting

    @property
    def read_failed(self) -> bool:
        return self._read_failed

    def act(self) -> bool:
        """Create, renew or take the Lease as last `read`, if we may; True while we lead."""
        if self._read_failed:
            return False
        sent_s, body = self._sent_s, self._body_read
        record = lease_record(body) if body is not None else None
        try:
            choice = choose(self._sighting if record else None, self.identity, sent_s)
            if choice.verdict is Verdict.WAIT:
                return False
            if choice.verdict is Verdict.CREATE:
                collection = self.lease.path.rsplit("/", 1)[0]
                self.client.request("POST", collection, body=self._body(None, taking=True))
            else:
                new = self._body(record, taking=choice.verdict is Verdict.TAKE)
                if choice.verdict is Verdict.RENEW:
                    assert body is not None
                    new["spec"]["acquireTime"] = (
                        body["spec"].get("acquireTime") or (new["spec"]["acquireTime"])
                    )
                self.client.request("PUT", self.lease.path, body=new)
            if choice.verdict is not Verdict.RENEW:
                log.info("%s leads %s: %s", self.identity, self.lease.path, choice.reason)
        except (Conflict, NotFound):
            return False  # someone else wrote first; read again next time
        except KubeError as exc:
            log.warning("lease %s: %s", self.lease.path, exc)
            return False
        self.guard.extend(Fence(renewed_s=sent_s, renew_deadline_s=self.timing.renew_deadline_s))
        return True

    # --- the loops -----------------------------------------------------------------------

    def wait_until_leading(self, stop: threading.Event | None = None) -> bool:
        """Block until this replica leads (True) or `stop` is set (False)."""
        stop = stop or threading.Event()
        logged = False
        while not stop.is_set():
            if self.try_once():
                return True
            if not logged and self._sighting is not None:
                log.info(
                    "%s is a standby: %s holds %s",
                    self.identity,
                    self._sighting.record.holder,
                    self.lease.path,
                )
                logged = True
            stop.wait(self.timing.retry_period_s)
        return False

    def start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew_loop, name="lease-renew", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.timing.retry_period_s):
            if self.try_once():
                continue
            holder = self._sighting.record.holder if self._sighting else ""
            if holder and holder != self.identity:
                self.on_lost(f"{holder} took {self.lease.path}")
                return
            if not self.guard.allows():
                self.on_lost(
                    f"no renew of {self.lease.path} succeeded within "
                    f"{self.timing.renew_deadline_s:g} s"
                )
                return

    def release(self) -> None:
        """Stop renewing and hand the Lease over at once (a clean stop, e.g. an upgrade)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timing.retry_period_s + self.client.timeout_s)
        self._hand_over()

    def give_up(self) -> None:
        """Close the fence, then release the Lease (a shard another replica asked for)."""
        self.guard.close()
        self._hand_over()

    def _hand_over(self) -> None:
        """Mark the Lease released, so a candidate takes it at once."""
        try:
            body = self.client.get(self.lease.path)
            if not body or (body.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            body["spec"]["holderIdentity"] = ""
            body["spec"]["leaseDurationSeconds"] = 1
            self.client.request("PUT", self.lease.path, body=body)
            log.info("%s released %s", self.identity, self.lease.path)
        except KubeError as exc:
            log.warning("could not release %s: %s", self.lease.path, exc)
