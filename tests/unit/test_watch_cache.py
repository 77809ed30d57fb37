"""The watch-fed cache's rules, on a scripted API server: events apply in order, a 410 or a
broken watch lists again, and a cache out of touch is never read as current (None: the reader
lists for itself)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tokenpilot.adapters.kube import KubeError
from tokenpilot.adapters.kube import watch as watch_module
from tokenpilot.adapters.kube.resources import CONFIGMAPS
from tokenpilot.adapters.kube.watch import WatchCache


def obj(name: str, version: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": version}, "data": data}


@dataclass
class ScriptedServer:
    """Answers listings from `lists` and watches from `watches`, in order; a watch script is
    a list of events, or a KubeError to raise. Once the scripts run out, watches block until
    `done` is set, as a quiet watch does."""

    lists: list[dict[str, Any]]
    watches: list[list[dict[str, Any]] | KubeError]
    timeout_s: float = 1.0
    watched_from: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        if not self.lists:
            self.done.wait()
            raise KubeError(0, "no more listings")
        return self.lists.pop(0)

    def stream(self, path: str, query: dict[str, str], **_: Any) -> Iterator[dict[str, Any]]:
        self.watched_from.append(query["resourceVersion"])
        if not self.watches:
            self.done.wait()
            return
        script = self.watches.pop(0)
        if isinstance(script, KubeError):
            raise script
        yield from script


def listing(version: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": version}, "items": list(items)}


def run(server: ScriptedServer, clock: Any = None) -> WatchCache:
    cache = WatchCache(server, CONFIGMAPS, ("ns",), **({"clock": clock} if clock else {}))  # type: ignore[arg-type]
    cache.start()
    return cache


def settled(cache: WatchCache, server: ScriptedServer, want: list[str]) -> None:
    """Wait (bounded) until the cache holds objects named `want`."""
    for _ in range(400):
        got = cache.snapshot()
        if got is not None and sorted(o["metadata"]["name"] for o in got) == want:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"the cache holds {cache.snapshot()}, not {want}")


@pytest.fixture(autouse=True)
def quick_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "FIRST_PAUSE_S", 0.01)


def test_events_apply_in_order_and_the_next_watch_starts_where_the_last_ended() -> None:
    server = ScriptedServer(
        lists=[listing("10", obj("a", "9"), obj("b", "10"))],
        watches=[
            [
                {"type": "ADDED", "object": obj("c", "11")},
                {"type": "MODIFIED", "object": obj("a", "12", k="v")},
                {"type": "DELETED", "object": obj("b", "13")},
            ],
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}],
        ],
    )
    cache = run(server)
    try:
        settled(cache, server, ["a", "c"])
        assert {o["metadata"]["name"]: o["data"] for o in cache.snapshot() or []} == {
            "a": {"k": "v"},
            "c": {},
        }
        for _ in range(400):
            if len(server.watched_from) >= 3:
                break
            threading.Event().wait(0.01)
        # Each watch from the last version seen, with no listing between.
        assert server.watched_from[:3] == ["10", "13", "20"]
    finally:
        server.done.set()
        cache.stop()


def test_a_gone_version_or_a_broken_watch_lists_again() -> None:
    server = ScriptedServer(
        lists=[listing("10", obj("a", "10")), listing("30", obj("b", "30")), listing("40")],
        watches=[
            [{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}],
            KubeError(0, "connection reset"),
        ],
    )
    cache = run(server)
    try:
        # The 410 lists again (b), the broken watch lists again (nothing left).
        settled(cache, server, [])
        assert server.watched_from[:2] == ["10", "30"]
    finally:
        server.done.set()
        cache.stop()


def test_a_cache_out_of_touch_is_not_read_as_current() -> None:
    now = [100.0]
    server = ScriptedServer(lists=[listing("10", obj("a", "10"))], watches=[])
    cache = run(server, clock=lambda: now[0])
    try:
        settled(cache, server, ["a"])
        # Quiet for longer than a watch may be silent and a listing may take: not current.
        now[0] += watch_module.QUIET_S + server.timeout_s + 1
        assert cache.snapshot() is None
    finally:
        server.done.set()
        cache.stop()


def test_nothing_is_read_before_the_first_listing() -> None:
    server = ScriptedServer(lists=[], watches=[])
    cache = run(server)
    try:
        assert cache.snapshot() is None
    finally:
        server.done.set()
        cache.stop()


def test_what_keep_refuses_is_not_kept_and_leaves_when_it_changes_to_that() -> None:
    server = ScriptedServer(
        lists=[listing("1", obj("a", "1", ready="yes"), obj("b", "1", ready="no"))],
        watches=[[{"type": "MODIFIED", "object": obj("a", "2", ready="no")}]],
    )
    cache = WatchCache(
        server,  # type: ignore[arg-type]
        CONFIGMAPS,
        ("ns",),
        keep=lambda o: o if o["data"].get("ready") == "yes" else None,
    )
    cache.start()
    try:
        settled(cache, server, [])
    finally:
        server.done.set()
        cache.stop()
