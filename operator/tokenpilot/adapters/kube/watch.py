"""A watch-fed cache of one kind: every object in the watched namespaces, kept current by the
API server's watch instead of listed again each time it is read.

Per namespace (one scope for all namespaces when none is named) a thread lists once, then
watches from the listing's resourceVersion with bookmarks, and applies each event to its scope:

    list    -> every object, and the resourceVersion to watch from
    watch   -> ADDED / MODIFIED store the object, DELETED drops it, BOOKMARK moves the
               resourceVersion on; the server ends a watch after `WATCH_S`, and the next one
               starts where it ended
    410     -> the resourceVersion has been compacted away: list again
    failure -> a refused or broken connection, or `QUIET_S` without a byte: list again after
               a pause that doubles up to `MAX_PAUSE_S`

A reader gets a snapshot, or None while any scope has not listed yet or has been out of touch
for longer than `QUIET_S` plus a listing's time: the caller then lists for itself, so a cache
that has lost its watch is never read as if it were current. Each stored object may be
reduced first (`keep`), so a cache of pods holds what its reader needs, not whole pods.

Decoding a listing of every pod and LLMService each round was the largest part of a round's
cost at fleet scale (docs/benchmarks/soak.md); with the cache only the objects that changed
are decoded, once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenpilot.adapters.kube.client import KubeClient, KubeError
from tokenpilot.adapters.kube.resources import Resource

log = logging.getLogger("tokenpilot.watch")

# How long the API server keeps one watch open before it ends it (timeoutSeconds).
WATCH_S = 60
# Bookmarks come about once a minute; a watch silent for this long is treated as broken.
QUIET_S = WATCH_S + 30.0
# Pauses before listing again after a failure: doubling from the first to the last.
FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 10.0

Key = tuple[str, str]  # (namespace, name)
Keep = Callable[[dict[str, Any]], Any]


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta.get("name") or "")


def _whole(obj: dict[str, Any]) -> Any:
    return obj


@dataclass
class _Scope:
    """One namespace's objects (or every namespace's), as one thread keeps them."""

    namespace: str | None
    objects: dict[Key, Any] = field(default_factory=dict)
    resource_version: str = ""
    listed: bool = False
    # Monotonic seconds of the last listing, event or bookmark: the watch was alive then.
    heard_s: float = 0.0


@dataclass
class WatchCache:
    """Every object of `resource` matching `query` in `namespaces` (all when empty), kept by
    one watch per namespace; `keep` reduces each object before it is stored."""

    client: KubeClient
    resource: Resource
    namespaces: Sequence[str] = ()
    query: Mapping[str, str] = field(default_factory=dict)
    keep: Keep = _whole
    clock: Callable[[], float] = time.monotonic
    _scopes: list[_Scope] = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        scopes: list[str | None] = [*self.namespaces] or [None]
        self._scopes = [_Scope(ns) for ns in scopes]

    def start(self) -> None:
        """One daemon thread per scope; returns at once (`snapshot` is None until each lists)."""
        for scope in self._scopes:
            thread = threading.Thread(
                target=self._run,
                args=(scope,),
                name=f"watch-{self.resource.plural}-{scope.namespace or 'all'}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Ask the threads to end; each does at its next event, or when its watch ends."""
        self._stop.set()

    def snapshot(self) -> list[Any] | None:
        """Every object kept, or None while a scope has not listed or is out of touch."""
        now_s = self.clock()
        with self._lock:
            if not all(s.listed and now_s - s.heard_s <= self._trusted_s() for s in self._scopes):
                return None
            return [obj for scope in self._scopes for obj in scope.objects.values()]

    def _trusted_s(self) -> float:
        # A watch may be silent for QUIET_S before it counts as broken, and a listing after
        # it takes up to the client's time limit.
        return QUIET_S + self.client.timeout_s

    # The thread's side.

    def _run(self, scope: _Scope) -> None:
        pause_s = FIRST_PAUSE_S
        while not self._stop.is_set():
            try:
                self._list(scope)
                pause_s = FIRST_PAUSE_S
                while not self._stop.is_set() and self._watch(scope):
                    pass
            except KubeError as error:
                log.warning(
                    "watch of %s in %s: %s; listing again in %g s",
                    self.resource.plural,
                    scope.namespace or "all namespaces",
                    error,
                    pause_s,
                )
                self._stop.wait(pause_s)
                pause_s = min(MAX_PAUSE_S, pause_s * 2)
            except Exception:
                # A bug must not end the thread: the cache would silently stop being trusted
                # and every read fall back to listing; say it loudly and start over.
                log.exception("watch of %s: unexpected failure", self.resource.plural)
                self._stop.wait(MAX_PAUSE_S)

    def _list(self, scope: _Scope) -> None:
        listed = self.client.request(
            "GET", self.resource.path(scope.namespace), query=dict(self.query) or None
        )
        objects = self._kept(listed.get("items") or [])
        with self._lock:
            scope.objects = objects
            scope.resource_version = str(listed.get("metadata", {}).get("resourceVersion", ""))
            scope.listed = True
            scope.heard_s = self.clock()

    def _kept(self, items: Iterable[dict[str, Any]]) -> dict[Key, Any]:
        out = {}
        for item in items:
            kept = self.keep(item)
            if kept is not None:
                out[_key(item)] = kept
        return out

    def _watch(self, scope: _Scope) -> bool:
        """One watch from the scope's resourceVersion until the server ends it: True to watch
        on from where it ended, False to list again (the version is gone, or we are told to
        stop)."""
        query = {
            **self.query,
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_S),
            "resourceVersion": scope.resource_version,
        }
        events = self.client.stream(
            self.resource.path(scope.namespace), query, read_timeout_s=QUIET_S
        )
        for event in events:
            if self._stop.is_set():
                return False
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                # 410 Gone: too old a resourceVersion; anything else, start over too.
                log.info("watch of %s: %s; listing again", self.resource.plural, obj.get("message"))
                return False
            self._apply(scope, str(kind), obj)
        with self._lock:
            scope.heard_s = self.clock()  # the server ended the watch: it was alive
        return True

    def _apply(self, scope: _Scope, kind: str, obj: dict[str, Any]) -> None:
        version = str(obj.get("metadata", {}).get("resourceVersion", ""))
        kept = None if kind in ("BOOKMARK", "DELETED") else self.keep(obj)
        with self._lock:
            scope.heard_s = self.clock()
            if version:
                scope.resource_version = version
            if kind == "BOOKMARK":
                return
            if kind == "DELETED" or kept is None:
                scope.objects.pop(_key(obj), None)
            else:
                scope.objects[_key(obj)] = kept
