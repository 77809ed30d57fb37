"""The API server's own count of write requests, read from its /metrics.

Tests and the reconcile benchmark use it to show that an idle resync writes nothing: the count
comes from the server, not from the operator's opinion of itself.
"""

from __future__ import annotations

from collections.abc import Collection

from tokenpilot.adapters.kube.client import KubeClient
from tokenpilot.adapters.metrics.parse import parse_metrics

WRITE_VERBS = frozenset({"APPLY", "PATCH", "POST", "PUT", "CREATE", "UPDATE", "DELETE"})

WriteCounts = dict[tuple[str, str, str], float]


def api_writes(
    client: KubeClient, resources: Collection[str], verbs: Collection[str] = WRITE_VERBS
) -> WriteCounts:
    """(verb, resource, subresource) -> requests served so far, for the given resources."""
    page = parse_metrics(client.text("/metrics"), only=["apiserver_request"])
    out: WriteCounts = {}
    for sample in page.series("apiserver_request_total"):
        labels = sample.labels
        if labels.get("verb") in verbs and labels.get("resource") in resources:
            key = (labels["verb"], labels["resource"], labels.get("subresource", ""))
            out[key] = out.get(key, 0.0) + sample.value
    return out


def write_delta(before: WriteCounts, after: WriteCounts) -> WriteCounts:
    """The requests served between two readings (only keys that grew)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v > before.get(k, 0.0)}
