"""The dev cluster's audit log (writes only, see components.AUDIT_POLICY) as data.

Each line is one request the API server completed: who (user, user agent), what (verb, resource,
namespace, name, the field manager named in the query) and when (received, completed). The
leader-election tests count writes per operator replica and check that the replicas' writing
intervals never overlap.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Write:
    user_agent: str
    user: str
    verb: str
    resource: str  # plural, with "/subresource" when there is one
    namespace: str
    name: str
    field_manager: str
    code: int
    received: datetime
    completed: datetime


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse(lines: Iterable[str]) -> list[Write]:
    out = []
    for line in lines:
        if not line.strip():
            continue
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete":
            continue
        ref = event.get("objectRef") or {}
        resource = str(ref.get("resource", ""))
        if ref.get("subresource"):
            resource += "/" + str(ref["subresource"])
        query = parse_qs(urlsplit(str(event.get("requestURI", ""))).query)
        out.append(
            Write(
                user_agent=str(event.get("userAgent", "")),
                user=str((event.get("user") or {}).get("username", "")),
                verb=str(event.get("verb", "")),
                resource=resource,
                namespace=str(ref.get("namespace", "")),
                name=str(ref.get("name", "")),
                field_manager=(query.get("fieldManager") or [""])[0],
                code=int((event.get("responseStatus") or {}).get("code", 0)),
                received=_time(str(event["requestReceivedTimestamp"])),
                completed=_time(str(event["stageTimestamp"])),
            )
        )
    return out


def read(state_dir: Path) -> list[Write]:
    """Every write in the log (and its one rotated backup, oldest first)."""
    logs = sorted((state_dir / "logs").glob("audit*.log"), key=lambda p: p.stat().st_mtime)
    writes: list[Write] = []
    for path in logs:
        with path.open(errors="replace") as handle:
            writes.extend(parse(handle))
    return writes


@dataclass(frozen=True)
class Span:
    """One writer's first and last write."""

    writer: str
    count: int
    first: datetime
    last: datetime


def spans(writes: Sequence[Write], writer_of: dict[str, str]) -> list[Span]:
    """Per writer (user agent -> writer name), its count and interval, earliest first."""
    by: dict[str, list[Write]] = {}
    for write in writes:
        writer = writer_of.get(write.user_agent)
        if writer is not None:
            by.setdefault(writer, []).append(write)
    out = [
        Span(w, len(ws), min(x.received for x in ws), max(x.completed for x in ws))
        for w, ws in by.items()
    ]
    return sorted(out, key=lambda s: s.first)


def overlaps(ordered: Sequence[Span]) -> list[tuple[str, str]]:
    """Pairs of writers whose intervals intersect."""
    return [
        (a.writer, b.writer)
        for i, a in enumerate(ordered)
        for b in ordered[i + 1 :]
        if b.first <= a.last
    ]


def table(writes: Sequence[Write], writer_of: dict[str, str]) -> list[tuple[str, str, int]]:
    """(writer, field manager or verb/resource, count), for reports."""
    counts: dict[tuple[str, str], int] = {}
    for write in writes:
        writer = writer_of.get(write.user_agent)
        if writer is None:
            continue
        what = write.field_manager or f"{write.verb} {write.resource}"
        counts[(writer, what)] = counts.get((writer, what), 0) + 1
    return sorted((w, what, n) for (w, what), n in counts.items())
