"""Metrics sources for the autoscaler, behind one small interface (`MetricsSource`).

    MetricsSource.read(target: ServiceTarget, now_s) -> PodScrapes | Observation
    ├── DirectSource        scrape every ready engine pod's /metrics (default, needs nothing)
    └── PrometheusSource    PromQL against a Prometheus server that scrapes the engines
    MetricsSources          the process's sources: one direct, one per Prometheus URL

`parse_metrics` is the project's one Prometheus text parser.
"""

from tokenpilot.adapters.metrics.base import MetricsSource, PodEndpoint, ServiceTarget
from tokenpilot.adapters.metrics.direct import DirectSource
from tokenpilot.adapters.metrics.parse import (
    MetricSample,
    MetricsPage,
    MetricsParseError,
    engine_sample,
    parse_metrics,
)
from tokenpilot.adapters.metrics.prometheus import PrometheusSource
from tokenpilot.adapters.metrics.sources import MetricsSources

__all__ = [
    "DirectSource",
    "MetricSample",
    "MetricsPage",
    "MetricsParseError",
    "MetricsSource",
    "MetricsSources",
    "PodEndpoint",
    "PrometheusSource",
    "ServiceTarget",
    "engine_sample",
    "parse_metrics",
]
