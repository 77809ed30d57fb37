"""A screenshot-free check of the generated dashboards.

Each panel is loaded as Grafana would: its datasource must be the dashboard's datasource
variable, every ``$variable`` it uses must be defined, and every metric a query names must be
exported by some component (vLLM's families, the operator's metrics or our recording rules).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tokenpilot.commands.dashboards import stale_files
from tokenpilot.core import vllm_metrics
from tokenpilot.core.dashboards.boards import all_dashboards
from tokenpilot.core.dashboards.files import dashboard_path, generated_files
from tokenpilot.core.dashboards.grafana import GRID_COLUMNS, expressions
from tokenpilot.core.dashboards.promql import metric_names
from tokenpilot.core.dashboards.rules import rule_groups

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "helm" / "tokenpilot" / "files"
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range"}
VARIABLE = re.compile(r"\$\{?(\w+)")


def vllm_series_names() -> set[str]:
    """Sample names vLLM writes, from its families (counters gain ``_total``)."""
    names: set[str] = set()
    for family in vllm_metrics.FAMILIES:
        if family.type is vllm_metrics.MetricType.counter:
            names.add(family.name + "_total")
        elif family.type is vllm_metrics.MetricType.histogram:
            names |= {family.name + suffix for suffix in ("_bucket", "_count", "_sum")}
        else:
            names.add(family.name)
    return names


def operator_series_names() -> set[str]:
    """Sample names the operator's exporter writes, read from its real registry."""
    from tokenpilot.adapters.operator_metrics import OperatorMetrics

    names: set[str] = set()
    for family in OperatorMetrics().registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + suffix for suffix in ("_bucket", "_count", "_sum")}
        else:
            names.add(family.name)
    return names


def recorded_names() -> set[str]:
    groups = rule_groups(vllm_metrics.TOKEN_LATENCY_BUCKETS_S, vllm_metrics.TTFT_BUCKETS_S)
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


BOARDS = all_dashboards()


def panels() -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    return [(stem, panel) for stem, board in BOARDS.items() for panel in board["panels"]]


@pytest.mark.parametrize(
    ("stem", "panel"), panels(), ids=lambda v: v if isinstance(v, str) else v["title"]
)
def test_each_panel_resolves_its_datasource_and_variables(stem: str, panel: dict) -> None:  # type: ignore[type-arg]
    variables = {v["name"] for v in BOARDS[stem]["templating"]["list"]}
    datasource_variable = next(
        v for v in BOARDS[stem]["templating"]["list"] if v["type"] == "datasource"
    )
    assert datasource_variable["query"] == "prometheus"
    assert panel["datasource"]["uid"] == "${" + datasource_variable["name"] + "}"
    assert panel["targets"], f"{panel['title']}: no queries"
    for target in panel["targets"]:
        assert target["datasource"] == panel["datasource"]
        used = set(VARIABLE.findall(target["expr"])) - BUILTIN_VARIABLES
        assert used <= variables, f"{panel['title']}: undefined variables {used - variables}"


def test_every_query_names_only_exported_metrics() -> None:
    exported = vllm_series_names() | operator_series_names() | recorded_names()
    unknown = {
        (stem, name)
        for stem, board in BOARDS.items()
        for expression in expressions(board)
        for name in metric_names(expression)
        if name not in exported
    }
    rules_unknown = {
        (group["name"], name)
        for group in rule_groups(vllm_metrics.TOKEN_LATENCY_BUCKETS_S, vllm_metrics.TTFT_BUCKETS_S)
        for rule in group["rules"]
        for name in metric_names(rule["expr"])
        if name not in exported
    }
    assert unknown | rules_unknown == set()


def test_the_check_catches_a_misspelt_metric() -> None:
    # The check above is only worth something if the scan sees names inside real queries.
    exported = vllm_series_names() | recorded_names()
    expression = (
        'sum by (namespace) (rate(vllm:generation_token_total{namespace=~"$namespace"}[5m]))'
    )
    assert metric_names(expression) - exported == {"vllm:generation_token_total"}


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("rate(a_total[5m])", {"a_total"}),
        (
            'sum by (le, namespace) (rate(x_bucket{le="0.05", a=~"$v"}[$__rate_interval]))',
            {"x_bucket"},
        ),
        ("a / on (namespace, llmservice) group_left (b) c", {"a", "c"}),
        ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m]))) > bool 1e3", {"h_bucket"}),
        (
            "vllm:num_requests_running offset 5m unless ignoring (pod) up",
            {"vllm:num_requests_running", "up"},
        ),
        (
            "tokenpilot:itl_good:rate5m and on (namespace) (t >= 0.05 < 0.075)",
            {"tokenpilot:itl_good:rate5m", "t"},
        ),
    ],
)
def test_metric_names_skips_labels_functions_and_keywords(expression: str, names: set[str]) -> None:
    assert metric_names(expression) == names


@pytest.mark.parametrize("stem", sorted(BOARDS))
def test_panels_tile_the_grid_without_overlap(stem: str) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in BOARDS[stem]["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= GRID_COLUMNS
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


def test_each_dashboard_has_namespace_and_service_variables() -> None:
    for stem, board in BOARDS.items():
        names = [v["name"] for v in board["templating"]["list"]]
        assert names == ["datasource", "namespace", "llmservice"], stem
        assert len({p["id"] for p in board["panels"]}) == len(board["panels"])


def test_fleet_dashboard_covers_the_slo_questions() -> None:
    titles = " | ".join(p["title"] for p in BOARDS["fleet"]["panels"])
    for needed in (
        "P99 inter-token latency",
        "P99 time to first token",
        "attainment, 1 h",
        "attainment, 28 d",
        "Error budget left",
        "burn rate",
    ):
        assert needed in titles


def test_committed_files_are_the_generated_ones() -> None:
    assert stale_files(FILES, generated_files()) == []
    for stem in BOARDS:
        assert json.loads((FILES / dashboard_path(stem)).read_text()) == BOARDS[stem]


def test_check_mode_names_a_file_edited_by_hand(tmp_path: Path) -> None:
    files = generated_files()
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    assert stale_files(tmp_path, files) == []
    edited = dashboard_path("fleet")
    (tmp_path / edited).write_text(files[edited].replace("Fleet SLOs", "Fleet"))
    assert stale_files(tmp_path, files) == [edited]


def test_the_command_writes_then_checks_then_catches_a_stale_file(tmp_path: Path) -> None:
    from tokenpilot.cli import main

    out = tmp_path / "files"
    assert main(["dashboards", "--out", str(out)]) == 0
    assert main(["dashboards", "--out", str(out), "--check"]) == 0
    rules = out / "rules" / "tokenpilot.rules.yaml"
    rules.write_text(rules.read_text().replace("14.4", "10"))
    assert main(["dashboards", "--out", str(out), "--check"]) == 1


def test_the_command_refuses_a_file_as_output(tmp_path: Path) -> None:
    from tokenpilot.cli import main

    target = tmp_path / "file"
    target.write_text("")
    assert main(["dashboards", "--out", str(target)]) == 2
