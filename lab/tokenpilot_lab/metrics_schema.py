"""The shape of a Prometheus /metrics page: families, types, label names and bucket edges.

Two pages have the same schema when a dashboard, a recording rule or the autoscaler written
against one works unchanged against the other; sample values, label values and HELP text do not
count. Parsing is prometheus_client's, so counters are named without their `_total` suffix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# Label names that carry a histogram's or a summary's structure, not a dimension.
_STRUCTURAL_LABELS = {"le", "quantile"}


@dataclass(frozen=True)
class FamilySchema:
    name: str
    type: str
    label_names: frozenset[str]
    # Upper bucket edges of a histogram, +Inf included; empty for other types.
    bucket_edges: tuple[float, ...] = ()

    def describe(self) -> str:
        labels = ",".join(sorted(self.label_names))
        edges = f" buckets={list(self.bucket_edges)}" if self.bucket_edges else ""
        return f"{self.type} {{{labels}}}{edges}"


def metrics_schema(text: str, prefix: str = "vllm:") -> dict[str, FamilySchema]:
    """The schema of every family on the page whose name starts with `prefix`."""
    schema: dict[str, FamilySchema] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(prefix):
            continue
        label_names: set[str] = set()
        edges: set[float] = set()
        for sample in family.samples:
            label_names.update(sample.labels)
            if sample.name.endswith("_bucket") and "le" in sample.labels:
                edges.add(float(sample.labels["le"]))
        schema[family.name] = FamilySchema(
            name=family.name,
            type=family.type,
            label_names=frozenset(label_names - _STRUCTURAL_LABELS),
            bucket_edges=tuple(sorted(edges, key=lambda e: math.inf if math.isinf(e) else e)),
        )
    return schema


def schema_differences(
    expected: dict[str, FamilySchema], actual: dict[str, FamilySchema]
) -> list[str]:
    """One line per difference, naming the family and what differs; empty when equal."""
    lines = [f"missing family {name}" for name in sorted(expected.keys() - actual.keys())]
    lines += [f"unexpected family {name}" for name in sorted(actual.keys() - expected.keys())]
    for name in sorted(expected.keys() & actual.keys()):
        want, got = expected[name], actual[name]
        if want != got:
            lines.append(f"{name}: expected {want.describe()}, got {got.describe()}")
    return lines
