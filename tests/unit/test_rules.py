"""The generated Prometheus rules and the SLO arithmetic behind them (bucket edges, windows) do
what the docs say. promtool's own checks of the committed rules are in
tests/integration/test_rules_promtool.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core import vllm_metrics
from tokenpilot.core.dashboards.files import RULES_PATH, generated_files
from tokenpilot.core.dashboards.rules import rule_groups
from tokenpilot.core.dashboards.slo import BURN_ALERTS, bucket_edge_for, le_label

REPO = Path(__file__).resolve().parents[2]
RULES_FILE = REPO / "helm" / "tokenpilot" / "files" / RULES_PATH
RULE_TESTS = sorted((REPO / "tests" / "rules").glob("*.test.yaml"))
ITL_EDGES = vllm_metrics.TOKEN_LATENCY_BUCKETS_S


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = {
        rule["alert"]
        for group in rule_groups(ITL_EDGES, ITL_EDGES)
        for rule in group["rules"]
        if "alert" in rule
    }
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert alerts - fired == set(), "alerts no test makes fire"
    assert alerts - quiet == set(), "alerts no test keeps quiet"


def test_committed_rules_are_the_generated_ones() -> None:
    assert RULES_FILE.read_text() == generated_files()[RULES_PATH]


@pytest.mark.parametrize(
    ("target_s", "edge_s", "says"),
    [
        (0.05, 0.05, "is a bucket edge"),
        (0.06, 0.05, "rounded down"),
        (0.0749, 0.05, "rounded down"),
        (0.2, 0.2, "is a bucket edge"),
        (0.005, 0.01, "below the smallest edge"),
        (500.0, 80.0, "rounded down"),
    ],
)
def test_a_target_maps_to_the_edge_at_or_below_it(
    target_s: float, edge_s: float, says: str
) -> None:
    edge = bucket_edge_for(target_s, ITL_EDGES)
    assert edge.edge_s == edge_s
    assert says in edge.reason


@given(st.floats(min_value=0.01, max_value=1000, allow_nan=False))
def test_rounding_never_flatters_attainment(target_s: float) -> None:
    # Counting good at an edge above the target would count misses as hits.
    assert bucket_edge_for(target_s, ITL_EDGES).edge_s <= target_s


@pytest.mark.parametrize(
    ("edge", "label"), [(0.05, "0.05"), (1.0, "1.0"), (10.0, "10.0"), (2560.0, "2560.0")]
)
def test_le_labels_are_spelled_as_the_python_client_writes_them(edge: float, label: str) -> None:
    assert le_label(edge) == label


def test_every_ttft_edge_has_exactly_one_clause() -> None:
    groups = rule_groups(ITL_EDGES, vllm_metrics.TTFT_BUCKETS_S)
    good = next(
        r["expr"] for r in groups[0]["rules"] if r.get("record") == "tokenpilot:ttft_good:rate5m"
    )
    for edge in vllm_metrics.TTFT_BUCKETS_S:
        assert good.count(f'le="{le_label(edge)}"') == 1


def test_burn_alerts_are_the_workbook_pairs() -> None:
    pairs = {(a.long_window, a.short_window, a.factor) for a in BURN_ALERTS}
    assert pairs == {("1h", "5m", 14.4), ("6h", "30m", 6.0)}
