"""Each service's autoscaler memory across processes: read once before the first evaluation,
written one shard a beat (every `SNAPSHOT_EVERY_S`, so at 1,000 services about one write in
4 s) and once more at shutdown, in ConfigMaps of the operator's own namespace
(adapters/kube/autoscaler_memory.py). A process killed between writes leaves a memory that much
older, which resumes with a hole (core.autoscale.memory)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.autoscaler_memory import (
    SHARDS,
    read_memories,
    shard_of,
    write_shard,
)
from tokenpilot.core.autoscale.memory import SNAPSHOT_EVERY_S

log = logging.getLogger("tokenpilot.autoscaler")

Key = tuple[str, str]


class Remembers(Protocol):
    def memory_now(self) -> dict[str, Any] | None: ...


@dataclass
class MemoryKeeper:
    """The memories an earlier process wrote, until each service's loop takes its own (None
    until they are read; nothing is written before, so an unread memory is never lost), and
    when each shard is written next (monotonic seconds)."""

    client: KubeClient
    namespace: str | None
    # With autoscaler shards: whether this replica holds a memory shard now, and the client
    # (behind that shard's fence) its writes go through. None: every shard, `client`.
    owns: Callable[[int], bool] | None = None
    client_of: Callable[[int], KubeClient] | None = None
    carried: dict[Key, dict[str, Any]] | None = field(default=None, init=False)
    _shard_due_s: dict[int, float] = field(default_factory=dict, init=False)
    _shards_kept: set[int] = field(default_factory=set, init=False)

    def read_again(self) -> None:
        """Read the memories again before the next evaluation (a shard was taken over: what
        its last holder wrote is newer than what was read at start)."""
        if self.carried is not None:
            self.carried = None

    async def read(self, now_s: float) -> None:
        """Once, before the first evaluation (and after `read_again`): the memories an earlier
        process wrote."""
        if self.namespace is None or self.carried is not None:
            return
        try:
            self.carried = await asyncio.to_thread(read_memories, self.client, self.namespace)
        except KubeError as error:
            log.warning(
                "autoscaler: cannot read the memories in %s (%s); retrying", self.namespace, error
            )
            return
        self._shards_kept = {shard_of(key) for key in self.carried}
        # Each shard on its own beat, so the writes spread over the interval.
        self._shard_due_s = {i: now_s + SNAPSHOT_EVERY_S * (i + 1) / SHARDS for i in range(SHARDS)}
        if self.carried:
            log.info(
                "autoscaler: read the memory of %d services in %s",
                len(self.carried),
                self.namespace,
            )

    def take(self, key: Key) -> dict[str, Any] | None:
        """The memory an earlier process wrote of `key`, handed over once."""
        return None if self.carried is None else self.carried.pop(key, None)

    def keep_only(self, keys: Iterable[Key]) -> None:
        """Forget the carried memories of services that are gone."""
        if self.carried is not None:
            wanted = set(keys)
            for key in set(self.carried) - wanted:
                del self.carried[key]

    async def write(self, now_s: float, loops: Mapping[Key, Remembers], *, only_due: bool) -> None:
        """Write each shard that is due, or all of them (at shutdown), with the carried
        memories and each loop's memory now; a failed write is logged and tried again at the
        shard's next beat."""
        if self.namespace is None or self.carried is None:
            return
        due = [
            index
            for index in range(SHARDS)
            if (not only_due or self._shard_due_s.get(index, now_s) <= now_s)
            and (self.owns is None or self.owns(index))
        ]
        if not due:
            return
        by_shard: dict[int, dict[Key, dict[str, Any]]] = {i: {} for i in due}
        for key, memory in self.carried.items():
            if (index := shard_of(key)) in by_shard:
                by_shard[index][key] = memory
        for key, loop in loops.items():
            if (index := shard_of(key)) in by_shard and (kept := loop.memory_now()) is not None:
                by_shard[index][key] = kept
        for index, shard in by_shard.items():
            self._shard_due_s[index] = now_s + SNAPSHOT_EVERY_S
            if not shard and index not in self._shards_kept:
                continue  # nothing to keep, nothing to drop
            try:
                client = self.client if self.client_of is None else self.client_of(index)
                await asyncio.to_thread(write_shard, client, self.namespace, index, shard)
            except KubeError as error:
                log.warning("autoscaler: cannot write memory shard %d: %s", index, error)
                continue
            self._shards_kept.add(index)
