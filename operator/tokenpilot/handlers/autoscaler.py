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
    decide(policy, history, observation, now_s)                   [core, pure]
    the Event, the MetricsAvailable condition and the status the  [core, pure:
    autoscaler owns                                                events, status]
    writes spec.replicas through the scale subresource if it changed, posts the Event, applies
    the status when it differs from what this loop applied last  [kube adapter]
    exports the decision, the bounds, the SLO targets and the replica's hourly cost

Every evaluation has a time limit and its own error handling, so a broken engine or an
unreachable Prometheus holds that service only. An API error skips one evaluation; the next
interval is the retry. The reconciler owns everything else in status and propagates
spec.replicas to the Deployment.

The process-wide part (metrics sources, the /metrics server) is built at startup from
`memo.autoscaler_config` (an AutoscalerConfig; defaults when absent). Time comes from the
runtime's clock (adapters/clock.py): monotonic seconds for decide(), wall time for status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf
from pydantic import ValidationError

from tokenpilot.adapters.clock import SYSTEM_CLOCK, Clock
from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.events import post_event
from tokenpilot.adapters.kube.llmservices import list_llmservices
from tokenpilot.adapters.kube.pods import ready_engine_pods
from tokenpilot.adapters.kube.scale import read_scale, write_scale
from tokenpilot.adapters.kube.status import AUTOSCALER, apply_status
from tokenpilot.adapters.metrics import MetricsSources, PodEndpoint, ServiceTarget
from tokenpilot.adapters.operator_metrics import OperatorMetrics
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.autoscale import AutoscalePolicy, Decision, History, Mode, Reason, decide
from tokenpilot.core.autoscale.spec import evaluation_interval_s, policy_from_spec
from tokenpilot.core.errors import InvalidSpec, TokenPilotError
from tokenpilot.core.events import scale_event
from tokenpilot.core.profiles import GPUProfile
from tokenpilot.core.render import selector_string
from tokenpilot.core.status import autoscaler_status, metrics_condition

log = logging.getLogger("tokenpilot.autoscaler")

# Used when the spec cannot be read at all: how soon to look again.
FALLBACK_INTERVAL_S = 5.0
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
    """Shared by every service's loop: the metrics sources, the operator's metrics, the clock."""

    config: AutoscalerConfig
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    sources: MetricsSources = field(init=False)
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self) -> None:
        self.sources = MetricsSources(timeout_s=self.config.scrape_timeout_s)


@dataclass
class ServiceLoop:
    """One service's evaluations; `history` is threaded from one decide() to the next, and
    `applied` is the status it last applied (it re-applies all of it with any change, since a
    field left out of an apply is removed)."""

    runtime: AutoscalerRuntime
    client: KubeClient
    namespace: str
    name: str
    profile_of: Callable[[str], GPUProfile] | None = None
    history: History = field(default_factory=History)
    applied: dict[str, Any] | None = None
    # Evaluations that scraped at least one pod. A P99 needs two scrapes, so the first one's
    # missing P99 is expected: no Warning for it (an Event of a real gap waits for the second).
    num_scrapes: int = 0
    blind_unannounced: bool = False

    async def evaluate(self, body: Mapping[str, Any]) -> float:
        """One evaluation; returns the seconds to wait before the next."""
        clock = self.runtime.clock
        started_s = clock.monotonic_s()
        try:
            service = LLMService.model_validate(dict(body))
            policy = policy_from_spec(service.spec)
            interval_s = evaluation_interval_s(service.spec)
        except (ValidationError, InvalidSpec) as error:
            # The user must fix the spec; keep the replicas and say so in status.
            replicas = int(body.get("spec", {}).get("replicas", 0))
            await self._apply_status(
                autoscaler_status(
                    self.applied,
                    desired_replicas=replicas,
                    mode=Mode.hold.value,
                    reason_code="InvalidSpec",
                    reason=f"autoscaling spec unusable: {error}",
                    condition=None,
                    now=clock.now_rfc3339(),
                )
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
        now_s = clock.monotonic_s()
        source = self.runtime.sources.for_spec(service.spec.autoscaling.metrics)
        observation = await source.observe(target, now_s)
        self.num_scrapes += observation.num_pods_scraped > 0
        decision = decide(policy, self.history, observation, now_s)
        self.history = decision.history
        try:
            await self._act(service, scale, decision, observation.problems)
        except KubeError as error:
            log.warning("%s/%s: cannot apply decision: %s", self.namespace, self.name, error)
        self._export(service, policy, decision, clock.monotonic_s() - started_s)
        return interval_s

    def _read_cluster(self, service: LLMService) -> tuple[int, tuple[PodEndpoint, ...]]:
        scale = read_scale(self.client, self.namespace, self.name)
        pods = ready_engine_pods(self.client, self.namespace, selector_string(service))
        return scale.spec_replicas, pods

    async def _act(
        self, service: LLMService, current: int, decision: Decision, problems: Sequence[str]
    ) -> None:
        now = self.runtime.clock.now_rfc3339()
        if decision.desired_replicas != current:
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
        previous = (self.applied or {}).get("autoscaling") or {}
        previous_code = None if self.blind_unannounced else previous.get("reasonCode")
        event = scale_event(current, decision, previous_code)
        first_scrape = decision.reason_code is Reason.missing_metrics and self.num_scrapes < 2
        self.blind_unannounced = event is not None and event.warning and first_scrape
        if self.blind_unannounced:
            event = None
        if event is not None:
            await asyncio.to_thread(
                post_event,
                self.client,
                namespace=self.namespace,
                name=self.name,
                uid=service.metadata.uid,
                event=event,
                now=now,
            )
        condition = metrics_condition(
            service.status.conditions,
            decision,
            problems=problems,
            generation=service.metadata.generation,
            now=now,
        )
        await self._apply_status(
            autoscaler_status(
                self.applied,
                desired_replicas=decision.desired_replicas,
                mode=decision.mode.value,
                reason_code=decision.reason_code.value,
                reason=decision.reason,
                condition=condition,
                now=now,
            )
        )

    async def _apply_status(self, owned: dict[str, Any]) -> None:
        """Apply what the autoscaler owns when it differs from what it applied last."""
        if owned == self.applied:
            return
        await asyncio.to_thread(
            apply_status, self.client, self.namespace, self.name, owned, field_manager=AUTOSCALER
        )
        self.applied = owned

    def _export(
        self,
        service: LLMService,
        policy: AutoscalePolicy,
        decision: Decision,
        evaluation_s: float,
    ) -> None:
        metrics, tuning = self.runtime.metrics, service.status.tuning
        metrics.record_decision(self.namespace, self.name, decision, evaluation_s)
        metrics.record_targets(
            self.namespace,
            self.name,
            min_replicas=policy.min_replicas,
            max_replicas=policy.max_replicas,
            attainment=service.spec.slo.attainment,
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
        clock = self.runtime.clock
        items = await asyncio.to_thread(list_llmservices, self.client, self.namespaces)
        bodies = {
            (item["metadata"].get("namespace") or "default", item["metadata"]["name"]): item
            for item in items
            if _enabled(item)
        }
        for key in set(self.loops) - set(bodies):
            self._forget(key)
        now_s = clock.monotonic_s()
        due = [key for key in bodies if self.due_s.get(key, now_s) <= now_s]
        waits = await asyncio.gather(*(self._evaluate(key, bodies[key]) for key in due))
        for key, wait_s in zip(due, waits, strict=True):
            self.due_s[key] = now_s + wait_s
        next_s = min(self.due_s.values(), default=now_s + MAX_IDLE_S) - clock.monotonic_s()
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
        self.runtime.sources.forget("/".join(key))
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
    shared = memo.runtime
    runtime = AutoscalerRuntime(config, clock=shared.clock)
    memo.autoscaler = runtime
    if config.metrics_port is not None:
        runtime.metrics.serve(config.metrics_port, config.metrics_address)
        log.info("operator metrics on %s:%d/metrics", config.metrics_address, config.metrics_port)
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
        await runtime.sources.aclose()
