"""What a kubelet does around a container that the pod runner does too, so the API server carries
the same pod status a real node would write:

- Secrets and ConfigMaps in env (`secretKeyRef`, `configMapKeyRef`) are resolved at each start;
  a missing one (not `optional`) keeps the container in CreateContainerConfigError with the
  kubelet's message (`secret "hf-token" not found`, `couldn't find key token in Secret
  ns/hf-token`), and the start is retried, so creating it later starts the container;
- a memory limit is enforced: a process tree whose resident memory passes
  `resources.limits.memory` is killed with SIGKILL and reported OOMKilled with exit code 137,
  as the kernel's cgroup OOM killer does;
- with `terminationMessagePolicy: FallbackToLogsOnError`, a container that fails gets the tail
  of its log (the last 80 lines, at most 2048 bytes, the kubelet's limits) as its termination
  message.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The kubelet's limits on a termination message read from the log.
TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048
OOM_EXIT_CODE = 137
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTOR = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


class ConfigError(Exception):
    """The container cannot be created from its spec; the message is the kubelet's."""


def memory_limit_bytes(container: Mapping[str, Any]) -> int | None:
    """`resources.limits.memory` in bytes, None when there is none (or it cannot be read)."""
    text = str(((container.get("resources") or {}).get("limits") or {}).get("memory") or "")
    match = _QUANTITY.match(text)
    if not match:
        return None
    return int(float(match.group(1)) * _FACTOR[match.group(2)])


def resident_bytes(pid: int) -> int:
    """Resident memory of `pid` and its descendants (what a cgroup would count), 0 if gone."""
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text()
        except OSError:
            continue
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        total += int(match.group(1)) * 1024 if match else 0
        todo.extend(int(child) for child in children.split())
    return total


def termination_message(log: Path, offset: int) -> str:
    """The tail of the log written since `offset`, within the kubelet's limits."""
    try:
        with log.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    tail = "\n".join(text.splitlines()[-TERMINATION_LOG_LINES:])
    return tail.encode()[-TERMINATION_LOG_BYTES:].decode(errors="ignore")


def resolve_env_sources(api: Any, namespace: str, container: Mapping[str, Any]) -> dict[str, str]:
    """The env variables that come from Secrets and ConfigMaps, read now; ConfigError when a
    referenced one (or its key) is missing and not optional."""
    from kubernetes.client.exceptions import ApiException

    env: dict[str, str] = {}
    for var in container.get("env") or []:
        source = var.get("valueFrom") or {}
        for kind, ref_key in (("secret", "secretKeyRef"), ("configmap", "configMapKeyRef")):
            ref = source.get(ref_key)
            if ref is None:
                continue
            name, key = ref.get("name", ""), ref.get("key", "")
            try:
                if kind == "secret":
                    obj = api.read_namespaced_secret(name, namespace)
                    data = {k: base64.b64decode(v).decode() for k, v in (obj.data or {}).items()}
                else:
                    obj = api.read_namespaced_config_map(name, namespace)
                    data = dict(obj.data or {})
            except ApiException as exc:
                if exc.status != 404:
                    raise
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind} "{name}" not found') from None
            if key not in data:
                if ref.get("optional"):
                    continue
                what = "Secret" if kind == "secret" else "ConfigMap"
                raise ConfigError(f"couldn't find key {key} in {what} {namespace}/{name}")
            env[var["name"]] = data[key]
    return env
