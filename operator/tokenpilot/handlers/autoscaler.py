"""The autoscaler loop: one operator-wide task evaluating every autoscaling LLMService.

The task starts with the operator (kopf.on.startup) and stops with it. Each round it lists the
LLMServices in the operator's namespaces and evaluates, concurrently, every one with
spec.autoscaling.enabled whose own `spec.autoscaling.interval` (5 s by default) has elapsed.
No per-object daemon or timer: kopf would put its finalizer on every autoscaled object, and an
LLMService could not be deleted while the operator is down. Deletion stays the garbage
collector's job, as for the reconciler.

One evaluation of one service

    reads the scale subresource and the Ready engine pods         [kube adapter]
    observes the service through its metrics source               [metrics adapter]
    decide(policy, history, observation, now)                     [core, pure]
    writes spec.replicas through the scale subresource if it changed, with an Event
    applies status.autoscaling and the MetricsAvailable condition (core.status.metrics_condition)
    when the outcome (replicas, mode, reason code) or the condition changed
    exports the decision, the bounds, the SLO targets and the replica's hourly cost

Every evaluation has a time limit and its own error handling, so a broken engine or an
unreachable Prometheus holds that service only. An API error skips one evaluation; the next
interval is the retry. The reconciler owns everything else in status and propagates
spec.replicas to the Deployment.

The process-wide part (metrics sources, the /metrics server) is built at startup from
`memo.autoscaler_config` (an AutoscalerConfig; defaults when absent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.events import post_event
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot.adapters.kube.scale import read_scale, write_scale
from tokenpilot.adapters.kube.status import AUTOSCALER, apply_status
from tokenpilot.adapters.metrics import (
    DirectSource,
    MetricsSource,
    PodEndpoint,
    PrometheusSource,
    ServiceTarget,
)
from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.api.llmservice import Condition, LLMService, MetricsSourceType
from tokenpilot.core.autoscale import AutoscalePolicy, Decision, History, Mode, Reason, decide
from tokenpilot.core.autoscale.spec import evaluation_interval_s, policy_from_spec
from tokenpilot.core.errors import InvalidSpec, TokenPilotError
from tokenpilot.core.profiles import GPUProfile
from tokenpilot.core.render import HTTP_PORT, selector_string
from tokenpilot.core.status import metrics_condition

log = logging.getLogger("tokenpilot.autoscaler")

PODS = RESOURCES[("v1", "Pod")]
# Used when the spec cannot be read at all: how soon to look again.
FALLBACK_INTERVAL_S = 5.0
BLIND = (Reason.missing_metrics, Reason.stale_metrics, Reason.partial_scrape)
# The longest one evaluation may take (scrapes have their own, shorter timeout).
EVALUATION_TIMEOUT_S = 30.0
# The longest the loop sleeps between listings, so a new service is seen this soon.
MAX_IDLE_S = 2.0


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
    profile_of: Callable[[str], GPUProfile] | None = None
    history: History = field(default_factory=History)
    last_status: tuple[int, str, str] | None = None
    # What this loop last applied to status: it re-applies all of it with any change, since
    # a field left out of an apply is removed.
    applied: dict[str, Any] | None = None

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
            await self._act(service, scale, decision, observation.problems)
        except KubeError as error:
            log.warning("%s/%s: cannot apply decision: %s", self.namespace, self.name, error)
        self._export(service, policy, decision, time.monotonic() - started_s)
        return interval_s

    def _read_cluster(self, service: LLMService) -> tuple[int, tuple[PodEndpoint, ...]]:
        scale = read_scale(self.client, self.namespace, self.name)
        return scale.spec_replicas, ready_pods(self.client, service)

    async def _act(
        self, service: LLMService, current: int, decision: Decision, problems: Sequence[str]
    ) -> None:
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
        condition = metrics_condition(
            service.status.conditions,
            decision,
            problems=problems,
            generation=service.metadata.generation,
            now=_now_iso(),
        )
        await self._write_status(
            decision.desired_replicas,
            decision.mode.value,
            decision.reason,
            code=decision.reason_code.value,
            condition=condition,
        )

    async def _write_status(
        self,
        desired: int,
        mode: str,
        reason: str,
        *,
        code: str = "InvalidSpec",
        condition: Condition | None = None,
    ) -> None:
        """Apply status.autoscaling (new when the outcome changed) and the MetricsAvailable
        condition (the last one when not given); a steady service costs no writes."""
        key = (desired, mode, code)
        previous = self.applied or {}
        autoscaling = previous.get("autoscaling")
        if key != self.last_status or autoscaling is None:
            autoscaling = {
                "desiredReplicas": desired,
                "mode": mode,
                "reason": reason,
                "lastDecisionTime": _now_iso(),
            }
        owned: dict[str, Any] = {"autoscaling": autoscaling}
        if condition is not None:
            owned["conditions"] = [
                condition.model_dump(by_alias=True, mode="json", exclude_none=True)
            ]
        elif "conditions" in previous:
            owned["conditions"] = previous["conditions"]
        if owned == self.applied:
            return
        await asyncio.to_thread(
            apply_status, self.client, self.namespace, self.name, owned, field_manager=AUTOSCALER
        )
        self.applied, self.last_status = owned, key

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
        metrics.record_replica_cost(self.namespace, self.name, *self._replica_cost(service))

    def _replica_cost(self, service: LLMService) -> tuple[str | None, float | None]:
        """The SKU in use and one replica's hourly cost in USD, when both are known."""
        tuning = service.status.tuning
        if tuning is None or self.profile_of is None:
            return None, None
        try:
            profile = self.profile_of(tuning.sku)
        except TokenPilotError:
            # A SKU the catalog no longer knows: no cost series rather than a wrong one.
            return tuning.sku, None
        return tuning.sku, profile.hourly_cost_usd * service.spec.gpus_per_replica


def _enabled(body: Mapping[str, Any]) -> bool:
    meta = body.get("metadata", {})
    return bool(body.get("spec", {}).get("autoscaling", {}).get("enabled")) and not meta.get(
        "deletionTimestamp"
    )


def list_services(client: KubeClient, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """Every LLMService in `namespaces` (all namespaces when empty)."""
    items: list[dict[str, Any]] = []
    scopes: list[str | None] = [*namespaces] or [None]
    for namespace in scopes:
        items.extend(client.request("GET", LLMSERVICES.path(namespace)).get("items", []))
    return items


@dataclass
class Evaluator:
    """The operator-wide loop's state: one ServiceLoop per autoscaled service, and when each
    is due next (monotonic seconds)."""

    runtime: AutoscalerRuntime
    client: KubeClient
    namespaces: Sequence[str] = ()
    profile_of: Callable[[str], GPUProfile] | None = None
    loops: dict[tuple[str, str], ServiceLoop] = field(default_factory=dict)
    due_s: dict[tuple[str, str], float] = field(default_factory=dict)

    async def round(self) -> float:
        """Evaluate every due service at once; returns the seconds until the next is due."""
        items = await asyncio.to_thread(list_services, self.client, self.namespaces)
        bodies = {
            (item["metadata"].get("namespace") or "default", item["metadata"]["name"]): item
            for item in items
            if _enabled(item)
        }
        for key in set(self.loops) - set(bodies):
            self._forget(key)
        now_s = time.monotonic()
        due = [key for key in bodies if self.due_s.get(key, now_s) <= now_s]
        waits = await asyncio.gather(*(self._evaluate(key, bodies[key]) for key in due))
        for key, wait_s in zip(due, waits, strict=True):
            self.due_s[key] = now_s + wait_s
        next_s = min(self.due_s.values(), default=now_s + MAX_IDLE_S) - time.monotonic()
        return max(0.0, min(next_s, MAX_IDLE_S))

    async def _evaluate(self, key: tuple[str, str], body: Mapping[str, Any]) -> float:
        loop = self.loops.get(key)
        if loop is None:
            loop = ServiceLoop(self.runtime, self.client, *key, profile_of=self.profile_of)
            self.loops[key] = loop
        try:
            return await asyncio.wait_for(loop.evaluate(body), EVALUATION_TIMEOUT_S)
        except TimeoutError:
            # A hung API call or scrape: this service skips a round, the others go on.
            log.warning("%s/%s: evaluation took over %g s", *key, EVALUATION_TIMEOUT_S)
        except Exception:
            # A bug must not stop the autoscaling of every other service; log it loudly.
            log.exception("%s/%s: evaluation failed", *key)
        return FALLBACK_INTERVAL_S

    def _forget(self, key: tuple[str, str]) -> None:
        """A deleted (or no longer autoscaled) service: drop its state and its series."""
        self.loops.pop(key, None)
        self.due_s.pop(key, None)
        for source in (self.runtime.direct, *self.runtime.prometheus.values()):
            if source is not None:
                source.forget("/".join(key))
        with contextlib.suppress(KeyError):
            self.runtime.metrics.forget(*key)


async def run_forever(evaluator: Evaluator) -> None:
    """Rounds until cancelled; a failed listing is retried after MAX_IDLE_S."""
    while True:
        try:
            wait_s = await evaluator.round()
        except KubeError as error:
            # The API server hiccupped; the next round lists again.
            log.warning("autoscaler: cannot list LLMServices: %s", error)
            wait_s = MAX_IDLE_S
        await asyncio.sleep(wait_s)


@kopf.on.startup()
async def _start_autoscaler(memo: Any, **_: Any) -> None:
    config = getattr(memo, "autoscaler_config", None) or AutoscalerConfig()
    runtime = AutoscalerRuntime(config)
    memo.autoscaler = runtime
    if config.metrics_port is not None:
        runtime.metrics.serve(config.metrics_port, config.metrics_address)
        log.info("operator metrics on %s:%d/metrics", config.metrics_address, config.metrics_port)
    shared = memo.runtime
    evaluator = Evaluator(runtime, shared.client, tuple(shared.namespaces), shared.by_name)
    memo.autoscaler_task = asyncio.create_task(run_forever(evaluator))


@kopf.on.cleanup()
async def _stop_autoscaler(memo: Any, **_: Any) -> None:
    task: asyncio.Task[None] | None = getattr(memo, "autoscaler_task", None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    runtime: AutoscalerRuntime | None = getattr(memo, "autoscaler", None)
    if runtime is not None:
        await runtime.aclose()
