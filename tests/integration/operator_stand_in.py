"""The operator's own metrics for the PromQL test, served on 127.0.0.1 from a fixed view of
a few services, with the series names the dashboards and rules read.

It stands in for the operator's exporter (tokenpilot/adapters/operator_metrics.py) until that
module is in the tree; the dashboard check (tests/unit/test_dashboards.py) is what proves the
names match the real exporter.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

SERVICE = ("namespace", "llmservice")


@dataclass(frozen=True)
class OperatorService:
    llmservice: str
    itl_p99_s: float
    ttft_p99_s: float
    attainment: float
    desired: int
    ready: int
    max_replicas: int
    reconcile_errors: bool
    token_budget: int = 2048
    replica_hourly_cost_dollars: float = 6.16


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def serve_operator_metrics(
    namespace: str, services: tuple[OperatorService, ...], port: int, stop: threading.Event
) -> None:
    registry = CollectorRegistry()
    gauges = {
        name: Gauge(name, name, SERVICE, registry=registry)
        for name in (
            "tokenpilot_slo_itl_p99_seconds",
            "tokenpilot_slo_ttft_p99_seconds",
            "tokenpilot_slo_attainment_target",
            "tokenpilot_desired_replicas",
            "tokenpilot_ready_replicas",
            "tokenpilot_max_replicas",
            "tokenpilot_token_budget",
            "tokenpilot_replica_hourly_cost_dollars",
        )
    }
    decisions = Counter(
        "tokenpilot_decisions", "decisions", (*SERVICE, "reason"), registry=registry
    )
    errors = Counter("tokenpilot_reconcile_errors", "errors", SERVICE, registry=registry)
    evaluation = Histogram(
        "tokenpilot_evaluation_duration_seconds", "evaluation", registry=registry
    )
    for service in services:
        labels = (namespace, service.llmservice)
        values = {
            "tokenpilot_slo_itl_p99_seconds": service.itl_p99_s,
            "tokenpilot_slo_ttft_p99_seconds": service.ttft_p99_s,
            "tokenpilot_slo_attainment_target": service.attainment,
            "tokenpilot_desired_replicas": service.desired,
            "tokenpilot_ready_replicas": service.ready,
            "tokenpilot_max_replicas": service.max_replicas,
            "tokenpilot_token_budget": service.token_budget,
            "tokenpilot_replica_hourly_cost_dollars": service.replica_hourly_cost_dollars,
        }
        for name, value in values.items():
            gauges[name].labels(*labels).set(value)
        errors.labels(*labels)
    server = make_server("127.0.0.1", port, make_wsgi_app(registry), handler_class=_Quiet)
    server.timeout = 0.5
    while not stop.is_set():
        # One evaluation round per request served or half second, as the autoscaler loop would.
        server.handle_request()
        for service in services:
            labels = (namespace, service.llmservice)
            decisions.labels(*labels, "steady").inc()
            if service.reconcile_errors:
                errors.labels(*labels).inc()
            evaluation.observe(0.004)
    server.server_close()
