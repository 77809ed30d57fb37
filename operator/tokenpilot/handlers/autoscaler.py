"""The autoscaler loop: one kopf daemon per LLMService with spec.autoscaling.enabled.

Every `spec.autoscaling.interval` (5 s by default) the daemon

    reads the scale subresource and the Ready engine pods         [kube adapter]
    observes the service through its metrics source               [metrics adapter]
    decide(policy, history, observation, now)                     [core, pure]
    writes spec.replicas through the scale subresource if it changed, with an Event
    writes status.autoscaling when the outcome (replicas, mode, reason code) changed
    exports the decision, the bounds and the SLO targets on the operator's /metrics

Each service has its own daemon, so a broken engine or an unreachable Prometheus holds that
service only. An API error skips one evaluation; the next interval is the retry. The reconciler
owns everything else in status and propagates spec.replicas to the Deployment.

The process-wide part (metrics sources, the /metrics server) is built at startup from
`memo.autoscaler_config` (an AutoscalerConfig; defaults when absent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.events import post_event
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.adapters.kube.scale import read_scale, write_scale
from tokenpilot.adapters.kube.status import patch_status
from tokenpilot.adapters.metrics import (
    DirectSource,
    MetricsSource,
    PodEndpoint,
    PrometheusSource,
    ServiceTarget,
)
from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.api.llmservice import GROUP, PLURAL, VERSION, LLMService, MetricsSourceType
from tokenpilot.core.autoscale import AutoscalePolicy, Decision, History, Mode, Reason, decide
from tokenpilot.core.autoscale.spec import evaluation_interval_s, policy_from_spec
from tokenpilot.core.errors import InvalidSpec
from tokenpilot.core.render import HTTP_PORT, selector_string

log = logging.getLogger("tokenpilot.autoscaler")

PODS = RESOURCES[("v1", "Pod")]
# Used when the spec cannot be read at all: how soon to look again.
FALLBACK_INTERVAL_S = 5.0
BLIND = (Reason.missing_metrics, Reason.stale_metrics, Reason.partial_scrape)


@dataclass(frozen=True)
class AutoscalerConfig:
    """Process-wide autoscaler settings (command-line flags of `tokenpilot run`)."""

    metrics_port: int | None = None  # None: do not serve the operator's /metrics
    metrics_address: str = "0.0.0.0"
    scrape_timeout_s: float = 2.0


@dataclass
class AutoscalerRuntime:
    """Shared by every service's daemon: one scraping client, one Prometheus client per URL."""

    config: AutoscalerConfig
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    direct: DirectSource | None = None
    prometheus: dict[str, PrometheusSource] = field(default_factory=dict)

    def source(self, service: LLMService) -> MetricsSource:
        wanted = service.spec.autoscaling.metrics
        if wanted.type is MetricsSourceType.prometheus and wanted.prometheus_url:
            url = wanted.prometheus_url
            if url not in self.prometheus:
                self.prometheus[url] = PrometheusSource(url, timeout_s=self.config.scrape_timeout_s)
            return self.prometheus[url]
        if self.direct is None:
            self.direct = DirectSource(timeout_s=self.config.scrape_timeout_s)
        return self.direct

    async def aclose(self) -> None:
        sources: list[MetricsSource] = [*self.prometheus.values()]
        if self.direct is not None:
            sources.append(self.direct)
        for source in sources:
            await source.aclose()


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp") or not pod.get("status", {}).get("podIP"):
        return False
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _metrics_url(pod: Mapping[str, Any]) -> str:
    port = HTTP_PORT
    for container in pod.get("spec", {}).get("containers", [])[:1]:
        for declared in container.get("ports") or []:
            if declared.get("name") == "http":
                port = int(declared["containerPort"])
    return f"http://{pod['status']['podIP']}:{port}/metrics"


def ready_pods(client: KubeClient, service: LLMService) -> tuple[PodEndpoint, ...]:
    """The service's Ready, non-terminating engine pods with their /metrics URLs."""
    meta = service.metadata
    listed = client.request(
        "GET", PODS.path(meta.namespace), query={"labelSelector": selector_string(service)}
    )
    pods = [pod for pod in listed.get("items", []) if _ready(pod)]
    return tuple(
        PodEndpoint(pod["metadata"]["name"], _metrics_url(pod))
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"])
    )


@dataclass
class ServiceLoop:
    """One service's evaluations; `history` is threaded from one decide() to the next."""

    runtime: AutoscalerRuntime
    client: KubeClient
    namespace: str
    name: str
    history: History = field(default_factory=History)
    last_status: tuple[int, str, str] | None = None

    async def evaluate(self, body: Mapping[str, Any]) -> float:
        """One evaluation; returns the seconds to wait before the next."""
        started_s = time.monotonic()
        try:
            service = LLMService.model_validate(dict(body))
            policy = policy_from_spec(service.spec)
            interval_s = evaluation_interval_s(service.spec)
        except (ValidationError, InvalidSpec) as error:
            # The user must fix the spec; keep the replicas and say so in status.
            replicas = int(body.get("spec", {}).get("replicas", 0))
            await self._write_status(
                replicas, Mode.hold.value, f"autoscaling spec unusable: {error}"
            )
            return FALLBACK_INTERVAL_S
        try:
            scale, pods = await asyncio.to_thread(self._read_cluster, service)
        except KubeError as error:
            # The API server hiccupped; holding for one interval is the safe side.
            log.warning("%s/%s: cannot read scale or pods: %s", self.namespace, self.name, error)
            return interval_s
        target = ServiceTarget(
            self.namespace,
            self.name,
            scale,
            len(pods),
            pods,
            read_ttft=policy.ttft_p99_slo_s is not None,
        )
        now_s = time.monotonic()
        observation = await self.runtime.source(service).observe(target, now_s)
        decision = decide(policy, self.history, observation, now_s)
        self.history = decision.history
        try:
            await self._act(service, scale, decision)
        except KubeError as error:
            log.warning("%s/%s: cannot apply decision: %s", self.namespace, self.name, error)
        self._export(service, policy, decision, time.monotonic() - started_s)
        return interval_s

    def _read_cluster(self, service: LLMService) -> tuple[int, tuple[PodEndpoint, ...]]:
        scale = read_scale(self.client, self.namespace, self.name)
        return scale.spec_replicas, ready_pods(self.client, service)

    async def _act(self, service: LLMService, current: int, decision: Decision) -> None:
        changed = decision.desired_replicas != current
        if changed:
            await asyncio.to_thread(
                write_scale, self.client, self.namespace, self.name, decision.desired_replicas
            )
            log.info(
                "%s/%s: %d -> %d (%s): %s",
                self.namespace,
                self.name,
                current,
                decision.desired_replicas,
                decision.mode.value,
                decision.reason,
            )
        previous_code = self.last_status[2] if self.last_status else None
        entering_blind = decision.reason_code in BLIND and previous_code != decision.reason_code
        if changed or entering_blind:
            await asyncio.to_thread(
                post_event,
                self.client,
                namespace=self.namespace,
                name=self.name,
                uid=service.metadata.uid,
                reason=decision.reason_code.value,
                message=f"{current} -> {decision.desired_replicas}: {decision.reason}",
                now=_now_iso(),
                warning=entering_blind,
            )
        await self._write_status(
            decision.desired_replicas,
            decision.mode.value,
            decision.reason,
            code=decision.reason_code.value,
        )

    async def _write_status(
        self, desired: int, mode: str, reason: str, *, code: str = "InvalidSpec"
    ) -> None:
        """status.autoscaling when the outcome changed; a steady service costs no writes."""
        key = (desired, mode, code)
        if key == self.last_status:
            return
        status: dict[str, Any] = {
            "desiredReplicas": desired,
            "mode": mode,
            "reason": reason,
            "lastDecisionTime": _now_iso(),
        }
        await asyncio.to_thread(
            patch_status, self.client, self.namespace, self.name, {"autoscaling": status}
        )
        self.last_status = key

    def _export(
        self,
        service: LLMService,
        policy: AutoscalePolicy,
        decision: Decision,
        evaluation_s: float,
    ) -> None:
        spec, metrics = service.spec, self.runtime.metrics
        tuning = service.status.tuning
        metrics.record_decision(self.namespace, self.name, decision, evaluation_s)
        metrics.record_targets(
            self.namespace,
            self.name,
            min_replicas=policy.min_replicas,
            max_replicas=policy.max_replicas,
            attainment=spec.slo.attainment,
            itl_p99_s=policy.itl_p99_slo_s,
            ttft_p99_s=policy.ttft_p99_slo_s,
            token_budget=None if tuning is None else tuning.max_num_batched_tokens,
        )


@kopf.on.startup()
async def _start_autoscaler(memo: Any, **_: Any) -> None:
    config = getattr(memo, "autoscaler_config", None) or AutoscalerConfig()
    memo.autoscaler = AutoscalerRuntime(config)
    if config.metrics_port is not None:
        memo.autoscaler.metrics.serve(config.metrics_port, config.metrics_address)
        log.info("operator metrics on %s:%d/metrics", config.metrics_address, config.metrics_port)


@kopf.on.cleanup()
async def _stop_autoscaler(memo: Any, **_: Any) -> None:
    runtime: AutoscalerRuntime | None = getattr(memo, "autoscaler", None)
    if runtime is not None:
        await runtime.aclose()


def _enabled(spec: Mapping[str, Any], **_: Any) -> bool:
    return bool(spec.get("autoscaling", {}).get("enabled"))


@kopf.daemon(GROUP, VERSION, PLURAL, when=_enabled, cancellation_timeout=10.0)
async def autoscale(
    body: kopf.Body,
    namespace: str | None,
    name: str,
    memo: Any,
    stopped: kopf.DaemonStopped,
    **_: Any,
) -> None:
    runtime: AutoscalerRuntime = memo.autoscaler
    namespace = namespace or "default"
    loop = ServiceLoop(runtime, memo.runtime.client, namespace, name)
    try:
        while not stopped:
            # kopf keeps `body` current, so each evaluation sees the latest spec.
            interval_s = await loop.evaluate(body)
            await stopped.wait(interval_s)
    finally:
        target_key = f"{namespace}/{name}"
        for source in (runtime.direct, *runtime.prometheus.values()):
            if source is not None:
                source.forget(target_key)
        with contextlib.suppress(KeyError):
            runtime.metrics.forget(namespace, name)
