"""Leader election on a `coordination.k8s.io/v1` Lease, as decisions (no I/O, no clock).

The rules are client-go's: a holder renews the Lease every `retry_period_s`; a candidate never
compares the Lease's `renewTime` with its own clock (clocks differ between nodes), it notes
*when it first saw* the current record on its own monotonic clock and may take the Lease once
that record has stood unchanged for `lease_duration_s`. The holder keeps acting only while its
last successful renew is younger than `renew_deadline_s` (shorter than the lease duration), so it
stops writing before any candidate may start: that is the write fence.

Times are monotonic seconds of the process that decides (`now_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class LeaseTiming:
    """client-go's defaults: 15 s lease, 10 s renew deadline, 2 s between tries."""

    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def problems(self) -> list[str]:
        """What is wrong with these numbers, each naming the option to change."""
        out = []
        if self.retry_period_s <= 0:
            out.append("--leader-election-retry-period must be positive")
        if self.renew_deadline_s <= self.retry_period_s:
            out.append(
                "--leader-election-renew-deadline must exceed the retry period "
                "(a holder needs more than one try before it gives up)"
            )
        if self.lease_duration_s <= self.renew_deadline_s:
            out.append(
                "--leader-election-lease-duration must exceed the renew deadline "
                "(the holder must stop writing before a standby may take over)"
            )
        return out

    def takeover_bound_s(self, start_up_s: float) -> float:
        """Worst case from a holder's death to a standby acting: the holder renewed just before
        dying; a standby sees that record up to one retry period later, waits the lease
        duration from then, and tries again at most one retry period after it expired."""
        return self.lease_duration_s + 2 * self.retry_period_s + start_up_s


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec as the API server holds it (`version` is its resourceVersion)."""

    holder: str  # "" when released
    lease_duration_s: float
    renew_time: str  # opaque to candidates: only a change of it matters
    transitions: int
    version: str


@dataclass(frozen=True)
class Sighting:
    """A record and the monotonic time this process first saw it unchanged."""

    record: LeaseRecord
    first_seen_s: float


def sight(previous: Sighting | None, record: LeaseRecord, now_s: float) -> Sighting:
    """Keep the first-seen time while the holder and renew time stay the same."""
    if (
        previous is not None
        and previous.record.holder == record.holder
        and previous.record.renew_time == record.renew_time
    ):
        return Sighting(record=record, first_seen_s=previous.first_seen_s)
    return Sighting(record=record, first_seen_s=now_s)


class Verdict(StrEnum):
    CREATE = "Create"  # no Lease yet
    RENEW = "Renew"  # ours
    TAKE = "Take"  # released, or its holder stopped renewing
    WAIT = "Wait"  # someone else holds it


@dataclass(frozen=True)
class Choice:
    verdict: Verdict
    reason: str


def choose(sighting: Sighting | None, identity: str, now_s: float) -> Choice:
    """What a candidate (or the holder) should do with the Lease it just read."""
    if sighting is None:
        return Choice(Verdict.CREATE, "no Lease exists yet")
    record = sighting.record
    if record.holder == identity:
        return Choice(Verdict.RENEW, "this replica holds the Lease")
    if not record.holder:
        return Choice(Verdict.TAKE, "the Lease was released")
    unchanged_s = now_s - sighting.first_seen_s
    if unchanged_s >= record.lease_duration_s:
        return Choice(
            Verdict.TAKE,
            f"{record.holder} has not renewed for {unchanged_s:.1f} s "
            f"(lease duration {record.lease_duration_s:g} s)",
        )
    return Choice(
        Verdict.WAIT,
        f"{record.holder} holds the Lease (renewed {unchanged_s:.1f} s ago as seen from here)",
    )


@dataclass(frozen=True)
class Fence:
    """Until when the holder may write: its last successful renew *was sent* at `renewed_s`,
    so the API server stored it no earlier, and no candidate can take over before
    `renewed_s + lease_duration`. Writing stops at `renewed_s + renew_deadline`."""

    renewed_s: float
    renew_deadline_s: float

    @property
    def open_until_s(self) -> float:
        return self.renewed_s + self.renew_deadline_s

    def allows(self, now_s: float) -> bool:
        return now_s < self.open_until_s
