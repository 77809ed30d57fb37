"""The metrics sources of one operator process: one direct source, one Prometheus source per
server URL, each made when a service first asks for it."""

from __future__ import annotations

from tokenpilot.adapters.metrics.base import MetricsSource
from tokenpilot.adapters.metrics.direct import DirectSource
from tokenpilot.adapters.metrics.prometheus import PrometheusSource
from tokenpilot.api.llmservice import MetricsSourceType, MetricsSpec


class MetricsSources:
    """Shared by every service: a source keeps connections and, for direct, each pod's ring."""

    def __init__(self, *, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._direct: DirectSource | None = None
        self._prometheus: dict[str, PrometheusSource] = {}

    def for_spec(self, spec: MetricsSpec) -> MetricsSource:
        """The source a service's `spec.autoscaling.metrics` names."""
        if spec.type is MetricsSourceType.prometheus and spec.prometheus_url:
            url = spec.prometheus_url
            if url not in self._prometheus:
                self._prometheus[url] = PrometheusSource(url, timeout_s=self._timeout_s)
            return self._prometheus[url]
        if self._direct is None:
            self._direct = DirectSource(timeout_s=self._timeout_s)
        return self._direct

    def _all(self) -> list[MetricsSource]:
        direct: list[MetricsSource] = [] if self._direct is None else [self._direct]
        return [*direct, *self._prometheus.values()]

    async def aclose(self) -> None:
        for source in self._all():
            await source.aclose()
