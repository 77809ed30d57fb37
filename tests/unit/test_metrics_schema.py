"""The /metrics schema (families, types, label names, bucket edges) and its differences."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tokenpilot_lab.metrics_schema import metrics_schema, schema_differences

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

PAGE = """\
# A comment line that is not HELP or TYPE is ignored.
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.5",model_name="m"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 1.2
# HELP process_open_fds Number of open file descriptors.
# TYPE process_open_fds gauge
process_open_fds 33.0
"""


def test_schema_keeps_names_types_labels_and_edges_not_values() -> None:
    schema = metrics_schema(PAGE)

    assert sorted(schema) == [
        "vllm:e2e_request_latency_seconds",
        "vllm:num_requests_running",
        "vllm:request_success",
    ]
    latency = schema["vllm:e2e_request_latency_seconds"]
    assert latency.type == "histogram"
    assert latency.label_names == {"engine", "model_name"}
    assert latency.bucket_edges == (0.5, 1.0, math.inf)
    assert schema["vllm:request_success"].label_names == {"engine", "finished_reason", "model_name"}
    assert schema["vllm:num_requests_running"].bucket_edges == ()


def test_same_schema_when_only_values_differ() -> None:
    other = PAGE.replace("3.0", "99.0").replace('model_name="m"', 'model_name="other"')

    assert schema_differences(metrics_schema(PAGE), metrics_schema(other)) == []


@pytest.mark.parametrize(
    ("change", "old", "new", "expected"),
    [
        (
            "a family renamed",
            "vllm:num_requests_running",
            "vllm:num_requests_active",
            [
                "missing family vllm:num_requests_running",
                "unexpected family vllm:num_requests_active",
            ],
        ),
        ("a type changed", "running gauge", "running counter", ["vllm:num_requests_running:"]),
        ("a label renamed", 'engine="0",le="0.5"', 'engine_id="0",le="0.5"', ["latency_seconds:"]),
        ("a bucket edge moved", 'le="0.5"', 'le="0.4"', ["vllm:e2e_request_latency_seconds:"]),
    ],
)
def test_each_kind_of_difference_is_named(
    change: str, old: str, new: str, expected: list[str]
) -> None:
    differences = schema_differences(metrics_schema(PAGE), metrics_schema(PAGE.replace(old, new)))

    assert len(differences) == len(expected), change
    for line, start in zip(differences, expected, strict=True):
        assert start in line, f"{change}: {line}"


def test_committed_vllm_fixtures_have_the_families_the_autoscaler_reads() -> None:
    fixtures = sorted(FIXTURES.glob("vllm-metrics-*.txt"))
    assert fixtures, f"no vllm-metrics-<version>.txt in {FIXTURES}"
    for fixture in fixtures:
        schema = metrics_schema(fixture.read_text())
        assert schema["vllm:num_requests_waiting"].type == "gauge", fixture.name
        assert schema["vllm:inter_token_latency_seconds"].type == "histogram", fixture.name
        assert schema["vllm:generation_tokens"].type == "counter", fixture.name
