"""The autoscaler's memory of each service (core.autoscale.memory), kept in ConfigMaps of the
operator's own namespace, so a restarted operator (an upgrade, a takeover) resumes it.

The operator's namespace, not the service's: the operator may read and write ConfigMaps there
only (docs/reliability.md, least privilege). So a service's memory cannot be owned by the
service for the garbage collector; it is one key of a shard instead, and a shard written
without a key drops it (server-side apply: the field manager's fields are what it applies),
which is how a deleted service's memory goes. `SHARDS` ConfigMaps, each service in the one its
name hashes to; a shard is at most `MAX_SHARD_BYTES`, and the services over it (the largest
first) are left out of that write and named in the log.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Mapping
from typing import Any

from tokenpilot.adapters.kube.apply import apply
from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.kube.resources import CONFIGMAPS

log = logging.getLogger("tokenpilot.autoscaler")

SHARDS = 16
LABEL = "serving.tokenpilot.dev/autoscaler-memory"
FIELD_MANAGER = "tokenpilot-autoscaler-memory"
# Under the API server's 1 MiB for a ConfigMap's data, with room for its metadata.
MAX_SHARD_BYTES = 900_000

ServiceKey = tuple[str, str]


def shard_of(key: ServiceKey) -> int:
    """The shard of a service (namespace, name): stable across processes and versions."""
    return zlib.crc32(f"{key[0]}/{key[1]}".encode()) % SHARDS


def shard_name(index: int) -> str:
    return f"tokenpilot-autoscaler-memory-{index:02d}"


def _data_key(key: ServiceKey) -> str:
    # A ConfigMap key allows letters, digits, '-', '_' and '.'; a namespace has no '.', so the
    # first one ends it.
    return f"{key[0]}.{key[1]}"


def read_memories(client: KubeClient, namespace: str) -> dict[ServiceKey, dict[str, Any]]:
    """Every service's memory in the operator's namespace; a key that is not JSON is logged
    and skipped (the service starts afresh)."""
    listed = client.request("GET", CONFIGMAPS.path(namespace), query={"labelSelector": LABEL})
    out: dict[ServiceKey, dict[str, Any]] = {}
    for item in listed.get("items") or []:
        where = f"ConfigMap {namespace}/{item['metadata']['name']}"
        for data_key, text in (item.get("data") or {}).items():
            service_namespace, _, name = data_key.partition(".")
            try:
                memory = json.loads(text)
            except ValueError as error:
                log.warning("%s, key %s: not JSON (%s); starting it afresh", where, data_key, error)
                continue
            if not name or not isinstance(memory, dict):
                log.warning("%s, key %s: not a service's memory; ignored", where, data_key)
                continue
            out[(service_namespace, name)] = memory
    return out


def write_shard(
    client: KubeClient, namespace: str, index: int, memories: Mapping[ServiceKey, dict[str, Any]]
) -> list[ServiceKey]:
    """Apply shard `index` holding exactly `memories`; the services left out for size."""
    texts = {key: json.dumps(memory, separators=(",", ":")) for key, memory in memories.items()}
    left_out: list[ServiceKey] = []
    total = sum(len(text) for text in texts.values())
    for key in sorted(texts, key=lambda k: len(texts[k]), reverse=True):
        if total <= MAX_SHARD_BYTES:
            break
        total -= len(texts.pop(key))
        left_out.append(key)
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": shard_name(index),
            "namespace": namespace,
            "labels": {LABEL: "v1", "app.kubernetes.io/managed-by": "tokenpilot"},
        },
        "data": {_data_key(key): text for key, text in sorted(texts.items())},
    }
    apply(client, body, field_manager=FIELD_MANAGER)
    if left_out:
        log.warning(
            "%s/%s: over %d bytes; left out the memory of %s (they start afresh after a restart)",
            namespace,
            shard_name(index),
            MAX_SHARD_BYTES,
            ", ".join("/".join(key) for key in left_out),
        )
    return left_out
