"""The Lease rules: a standby takes over only after the holder's fence has closed, whatever the
timing, renew history and observation lag."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.lease import (
    Fence,
    LeaseRecord,
    LeaseTiming,
    Sighting,
    Verdict,
    choose,
    sight,
)
from tokenpilot.handlers.leadership import default_identity


def record(holder: str, renew: str, duration_s: float = 15.0) -> LeaseRecord:
    return LeaseRecord(holder, duration_s, renew, transitions=0, version="1")


def test_a_missing_lease_is_created_and_ones_own_is_renewed() -> None:
    assert choose(None, "a", 0.0).verdict is Verdict.CREATE
    mine = Sighting(record("a", "t0"), first_seen_s=0.0)
    assert choose(mine, "a", 100.0).verdict is Verdict.RENEW


def test_a_released_lease_is_taken_at_once() -> None:
    released = Sighting(record("", "t0"), first_seen_s=5.0)
    assert choose(released, "b", 5.0).verdict is Verdict.TAKE


def test_a_standby_waits_the_lease_duration_from_when_it_first_saw_the_record() -> None:
    first = sight(None, record("a", "t0"), now_s=10.0)
    same = sight(first, record("a", "t0"), now_s=20.0)
    assert same.first_seen_s == 10.0
    choice = choose(same, "b", 24.9)
    assert choice.verdict is Verdict.WAIT and "a holds the Lease" in choice.reason
    taken = choose(same, "b", 25.0)
    assert taken.verdict is Verdict.TAKE and "has not renewed for 15.0 s" in taken.reason
    renewed = sight(same, record("a", "t1"), now_s=24.0)
    assert choose(renewed, "b", 30.0).verdict is Verdict.WAIT


def test_bad_timing_names_the_option() -> None:
    problems = LeaseTiming(lease_duration_s=5, renew_deadline_s=10, retry_period_s=2).problems()
    assert problems == [
        "--leader-election-lease-duration must exceed the renew deadline "
        "(the holder must stop writing before a standby may take over)"
    ]
    assert LeaseTiming().problems() == []
    assert LeaseTiming().takeover_bound_s(15.0) == 34.0


@given(
    duration=st.floats(2.0, 60.0),
    deadline_share=st.floats(0.1, 0.95),
    renew_sent_s=st.floats(0.0, 1e6),
    storage_lag_s=st.floats(0.0, 5.0),
    observe_lag_s=st.floats(0.0, 5.0),
)
def test_the_fence_closes_before_any_standby_may_take_over(
    duration: float,
    deadline_share: float,
    renew_sent_s: float,
    storage_lag_s: float,
    observe_lag_s: float,
) -> None:
    """The holder's last renew leaves at renew_sent_s, is stored a little later and seen by a
    standby later still (one clock rate, as on one node). The first instant the standby may
    take the Lease is after the last instant the holder may write."""
    fence = Fence(renewed_s=renew_sent_s, renew_deadline_s=duration * deadline_share)
    stored_s = renew_sent_s + storage_lag_s
    sighting = sight(None, record("a", "last", duration), now_s=stored_s + observe_lag_s)
    first_take_s = sighting.first_seen_s + duration * (1 + 1e-9)  # float rounding aside
    assert choose(sighting, "b", sighting.first_seen_s + duration * 0.999).verdict is Verdict.WAIT
    assert choose(sighting, "b", first_take_s).verdict is Verdict.TAKE
    assert not fence.allows(first_take_s)
    assert fence.allows(renew_sent_s)


def test_a_pods_identity_is_new_at_every_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container the kubelet restarts in the same pod is a new candidate, not the holder."""
    monkeypatch.setenv("POD_NAME", "tokenpilot-5d9c7b8f4-x2kqz")
    first, again = default_identity(), default_identity()
    assert first.startswith("tokenpilot-5d9c7b8f4-x2kqz_") and again != first
    assert first.split("_", 1)[0] == "tokenpilot-5d9c7b8f4-x2kqz"
