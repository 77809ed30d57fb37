"""Grafana dashboard JSON as plain data: a dashboard, its template variables and its panels.

Every panel and target names the dashboard's own ``datasource`` variable, so one file works
against whichever Prometheus the Grafana sidecar or an import binds it to. Layout is computed:
panels flow left to right, two or three to a row, in the order given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
GRID_COLUMNS = 24


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    targets: tuple[Target, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    width: int = 12
    height: int = 8
    thresholds: tuple[tuple[float, str], ...] = field(default=())


def _variables(service_multi: bool) -> list[Json]:
    """datasource, namespace and llmservice; the last two read the operator's own gauges."""
    selector = "tokenpilot_desired_replicas"
    namespace_query = f"label_values({selector}, namespace)"
    service_query = f'label_values({selector}{{namespace=~"$namespace"}}, llmservice)'
    return [
        {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
        },
        {
            "name": "namespace",
            "label": "Namespace",
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": namespace_query, "refId": "namespace"},
            "definition": namespace_query,
            "refresh": 2,
            "multi": True,
            "includeAll": True,
            "allValue": ".*",
            "current": {},
            "sort": 1,
        },
        {
            "name": "llmservice",
            "label": "LLMService",
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": service_query, "refId": "llmservice"},
            "definition": service_query,
            "refresh": 2,
            "multi": service_multi,
            "includeAll": service_multi,
            "allValue": ".*" if service_multi else None,
            "current": {},
            "sort": 1,
        },
    ]


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> Json:
    steps: list[Json] = [{"color": "green", "value": None}]
    steps += [{"color": color, "value": value} for value, color in panel.thresholds]
    body: Json = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {
                "unit": panel.unit,
                "thresholds": {"mode": "absolute", "steps": steps},
            },
            "overrides": [],
        },
        "options": {"legend": {"displayMode": "table", "placement": "bottom"}},
        "targets": [
            {
                "refId": chr(ord("A") + index),
                "datasource": DATASOURCE,
                "expr": target.expr,
                "legendFormat": target.legend,
            }
            for index, target in enumerate(panel.targets)
        ],
    }
    if panel.kind == "stat":
        body["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"}
    return body


def dashboard(
    uid: str, title: str, description: str, panels: list[Panel], service_multi: bool
) -> Json:
    """A complete dashboard model, ready for the Grafana sidecar or an import."""
    laid_out: list[Json] = []
    x = y = row_height = 0
    for panel_id, panel in enumerate(panels, start=1):
        if x + panel.width > GRID_COLUMNS:
            x, y, row_height = 0, y + row_height, 0
        laid_out.append(_panel_json(panel, panel_id, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["tokenpilot", "llm", "slo"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": _variables(service_multi)},
        "annotations": {"list": []},
        "panels": laid_out,
    }


_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*\w+\)$")


def expressions(board: Json) -> list[str]:
    """Every PromQL expression in a dashboard: panel targets, then the series selector of each
    ``label_values(selector, label)`` variable query (Grafana's function, not PromQL)."""
    found = [t["expr"] for p in board["panels"] for t in p["targets"]]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            match = _LABEL_VALUES.match(variable["definition"])
            if match is None:
                raise ValueError(f"variable {variable['name']}: not a label_values() query")
            found.append(match.group("selector"))
    return found
