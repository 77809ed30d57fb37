"""The operator's real exporter (tokenpilot.adapters.operator_metrics) filled with a fixed view
of a few services and served on 127.0.0.1, for the PromQL test: the same registry, names and
labels the running operator serves, without needing a cluster."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app

from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.core.autoscale.decision import Mode, Reason


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
    sku: str = "H100-80GB"
    replica_hourly_cost_usd: float = 6.16
    engine_step_pace: float | None = None


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def serve_operator_metrics(
    namespace: str, services: tuple[OperatorService, ...], port: int, stop: threading.Event
) -> None:
    metrics = OperatorMetrics()
    for service in services:
        metrics.record_targets(
            namespace,
            service.llmservice,
            min_replicas=1,
            max_replicas=service.max_replicas,
            attainment=service.attainment,
            itl_p99_s=service.itl_p99_s,
            ttft_p99_s=service.ttft_p99_s,
            token_budget=service.token_budget,
        )
        metrics.record_replica_cost(
            namespace, service.llmservice, service.sku, service.replica_hourly_cost_usd
        )
        metrics.record_pace(namespace, service.llmservice, service.engine_step_pace)
        metrics.desired_replicas.labels(namespace, service.llmservice).set(service.desired)
        metrics.ready_replicas.labels(namespace, service.llmservice).set(service.ready)
    server = make_server("127.0.0.1", port, make_wsgi_app(metrics.registry), handler_class=_Quiet)
    server.timeout = 0.5
    while not stop.is_set():
        # One evaluation round per scrape or half second, as the autoscaler loop would make.
        server.handle_request()
        for service in services:
            labels = (namespace, service.llmservice)
            metrics.decisions.labels(*labels, Mode.steady.value, Reason.itl_over_slo.value).inc()
            if service.reconcile_errors:
                metrics.reconcile_errors.labels(*labels).inc()
            metrics.evaluation_s.observe(0.004)
    server.server_close()
