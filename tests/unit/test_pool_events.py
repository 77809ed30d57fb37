"""The Events a service with GPU pools posts: a spill, a return, a new split; each once."""

from __future__ import annotations

from typing import Any

from tokenpilot.core.events import pool_events


def status(*pools: tuple[str, str, int]) -> dict[str, Any]:
    return {
        "pools": [
            {"sku": sku, "state": state, "replicas": replicas, "reason": f"{sku} reason"}
            for sku, state, replicas in pools
        ]
    }


def test_a_spill_is_a_warning_once_and_its_end_is_said() -> None:
    serving = status(("H100-80GB", "Serving", 2), ("L40S", "Idle", 0))
    spilled = status(("H100-80GB", "SpilledOver", 0), ("L40S", "Serving", 4))
    events = pool_events(serving, spilled)
    assert [(e.reason, e.warning) for e in events] == [
        ("PoolSpilledOver", True),
        ("PoolsSplit", False),
    ]
    assert events[1].message == "replicas per pool: H100-80GB 0, L40S 4"
    assert pool_events(spilled, spilled) == []
    back = status(("H100-80GB", "Serving", 2), ("L40S", "Serving", 4))
    assert [e.reason for e in pool_events(spilled, back)] == ["PoolRestored", "PoolsSplit"]


def test_a_service_without_pools_posts_none() -> None:
    assert pool_events({}, {}) == []
    assert pool_events(status(("L40S", "Serving", 1)), {}) == []
