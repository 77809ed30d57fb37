"""The operator's own /metrics: what the autoscaler decided, how long it took, and each
service's bounds and SLO targets as gauges (the recording rules and dashboards join on them).

Series carry `namespace` and `llmservice`, the labels the engine series get from the scrape
config, so one `on (namespace, llmservice)` joins both. Names are the ones the generated
dashboards and alerts (tokenpilot.core.dashboards) query:

    tokenpilot_desired_replicas, tokenpilot_ready_replicas, tokenpilot_min_replicas,
    tokenpilot_max_replicas, tokenpilot_token_budget            gauges per service
    tokenpilot_slo_itl_p99_seconds, tokenpilot_slo_ttft_p99_seconds,
    tokenpilot_slo_attainment_target                             SLO targets per service
    tokenpilot_replica_hourly_cost_dollars{sku}                  one replica's GPU cost per hour
    tokenpilot_decisions_total{mode, reason}                     counter per service
    tokenpilot_evaluation_duration_seconds                       histogram, one per operator
    tokenpilot_evaluation_gap_seconds                            histogram, one per operator:
                                                                 start to start, per service
    tokenpilot_reconcile_errors_total                            counter per service
    tokenpilot_leader                                            1 leading, 0 standing by
    tokenpilot_pool_desired_replicas{phase},                     a disaggregated service's
    tokenpilot_pool_ready_replicas{phase},                       pools (phase prefill or
    tokenpilot_pool_token_budget{phase},                         decode), each scaled on
    tokenpilot_pool_decisions_total{phase, mode, reason}         its own signal
    tokenpilot_workload_requests,                                status.workload: what the
    tokenpilot_workload_prompt_tokens{stat},                     engines served (stat mean or
    tokenpilot_workload_output_tokens{stat},                     p99), absent until the
    tokenpilot_workload_mean_context_tokens,                     engines have finished a
    tokenpilot_workload_arrival_rate_per_second,                 request
    tokenpilot_workload_prefix_cache_hit_ratio,
    tokenpilot_retune_recommended_token_budget,                  status.tuning.recommendation,
    tokenpilot_retune_predicted_gain                             absent without one

Every replica serves the page from its start, a standby too (with `tokenpilot_leader` 0 and its
process series): a Service or scrape that reaches a standby gets an answer, not a refusal.
One registry per process (with the process collector for CPU and memory), served by
prometheus_client's HTTP server on a port of its own.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)

from tokenpilot.api.workload import RetuneRecommendation
from tokenpilot.core.autoscale import Decision
from tokenpilot.core.autoscale.workload import LearnedWorkload

SERVICE = ("namespace", "llmservice")
POOL = (*SERVICE, "phase")
# A per-request figure of the learned workload: its exact mean or its P99 (a bucket's edge).
STAT = (*SERVICE, "stat")
# Evaluation of one service: a scrape round trip (ms) up to a scrape timeout (seconds).
EVALUATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
# Start to start of one service's evaluations: its interval (5 s by default) when the operator
# keeps up, and edges at 1.2 and 2 intervals where it does not.
GAP_BUCKETS_S = (1.0, 2.0, 5.5, 6.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0)


@dataclass
class OperatorMetrics:
    """The operator's metric families, on their own registry."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    # The SKU each service's cost series is labelled with, so an evaluation finds its own
    # series without scanning every service's.
    _cost_sku: dict[tuple[str, str], str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        r = self.registry
        ProcessCollector(registry=r)
        self.leader = Gauge(
            "tokenpilot_leader",
            "1 while this replica leads (runs the handlers), 0 while it stands by.",
            registry=r,
        )
        self.shards_held = Gauge(
            "tokenpilot_autoscaler_shards_held",
            "Autoscaler shards this replica holds and evaluates (--autoscaler-shards; without "
            "shards, 1 on the leader).",
            registry=r,
        )
        self.desired_replicas = Gauge(
            "tokenpilot_desired_replicas", "Replicas the autoscaler asked for.", SERVICE, registry=r
        )
        self.ready_replicas = Gauge(
            "tokenpilot_ready_replicas", "Engine pods that are Ready.", SERVICE, registry=r
        )
        # The figures behind each decision, as it read them (status.autoscaling.reason words
        # them, refreshed only with a change a reader acts on; these follow every evaluation).
        self.queue_per_replica = Gauge(
            "tokenpilot_queue_per_replica",
            "Requests waiting per Ready replica, as the autoscaler read them.",
            SERVICE,
            registry=r,
        )
        self.itl_p99_s = Gauge(
            "tokenpilot_itl_p99_seconds",
            "P99 inter-token latency over the autoscaler's window; absent while unread.",
            SERVICE,
            registry=r,
        )
        self.ttft_p99_s = Gauge(
            "tokenpilot_ttft_p99_seconds",
            "P99 time to first token over the autoscaler's window; absent while unread.",
            SERVICE,
            registry=r,
        )
        self.forecast_memory_s = Gauge(
            "tokenpilot_forecast_memory_seconds",
            "Seconds of load the demand forecast rests on (a restarted operator resumes them).",
            SERVICE,
            registry=r,
        )
        self.min_replicas = Gauge(
            "tokenpilot_min_replicas", "spec.autoscaling.minReplicas.", SERVICE, registry=r
        )
        self.max_replicas = Gauge(
            "tokenpilot_max_replicas", "spec.autoscaling.maxReplicas.", SERVICE, registry=r
        )
        self.token_budget = Gauge(
            "tokenpilot_token_budget",
            "The per-step token budget in use (max_num_batched_tokens).",
            SERVICE,
            registry=r,
        )
        self.slo_itl_p99_s = Gauge(
            "tokenpilot_slo_itl_p99_seconds", "spec.slo.itlP99 in seconds.", SERVICE, registry=r
        )
        self.slo_ttft_p99_s = Gauge(
            "tokenpilot_slo_ttft_p99_seconds", "spec.slo.ttftP99 in seconds.", SERVICE, registry=r
        )
        self.slo_attainment = Gauge(
            "tokenpilot_slo_attainment_target",
            "spec.slo.attainment: the fraction that must meet the objectives.",
            SERVICE,
            registry=r,
        )
        self.engine_step_pace = Gauge(
            "tokenpilot_engine_step_pace_ratio",
            "The engines' steps over the step model's price of them (measured over the "
            "forecast's memory; above 1: slower than the GPU profile says); absent until "
            "measured.",
            SERVICE,
            registry=r,
        )
        self.replica_hourly_cost = Gauge(
            "tokenpilot_replica_hourly_cost_dollars",
            "One replica's hourly cost in USD: the GPU profile's hourly cost x GPUs per replica.",
            (*SERVICE, "sku"),
            registry=r,
        )
        self.decisions = Counter(
            "tokenpilot_decisions",
            "Autoscaler evaluations by outcome.",
            (*SERVICE, "mode", "reason"),
            registry=r,
        )
        self.evaluation_s = Histogram(
            "tokenpilot_evaluation_duration_seconds",
            "Time to evaluate one service: read metrics, decide, write.",
            buckets=EVALUATION_BUCKETS_S,
            registry=r,
        )
        self.evaluation_gap_s = Histogram(
            "tokenpilot_evaluation_gap_seconds",
            "Seconds from the start of one evaluation of a service to the start of its next: "
            "its interval while the operator keeps up.",
            buckets=GAP_BUCKETS_S,
            registry=r,
        )
        self.round_reads = Counter(
            "tokenpilot_round_reads",
            "What the autoscaler's rounds read the LLMServices and the Ready engine pods from: "
            "`watch` (the watch-fed cache) or `listing` (listed, while the cache was not "
            "current).",
            ("kind", "source"),
            registry=r,
        )
        self.pool_desired_replicas = Gauge(
            "tokenpilot_pool_desired_replicas",
            "Replicas the autoscaler asked for, per pool of a disaggregated service.",
            POOL,
            registry=r,
        )
        self.pool_ready_replicas = Gauge(
            "tokenpilot_pool_ready_replicas",
            "Engine pods that are Ready, per pool of a disaggregated service.",
            POOL,
            registry=r,
        )
        self.pool_token_budget = Gauge(
            "tokenpilot_pool_token_budget",
            "The per-step token budget the pool's engines run (max_num_batched_tokens).",
            POOL,
            registry=r,
        )
        self.pool_decisions = Counter(
            "tokenpilot_pool_decisions",
            "Autoscaler evaluations of a disaggregated service's pool, by outcome.",
            (*POOL, "mode", "reason"),
            registry=r,
        )
        self.reconcile_errors = Counter(
            "tokenpilot_reconcile_errors",
            "Reconciles that failed talking to the API server.",
            SERVICE,
            registry=r,
        )
        self.workload_requests = Gauge(
            "tokenpilot_workload_requests",
            "Requests finished in the learned workload's window (status.workload.requests): "
            "what every workload figure rests on.",
            SERVICE,
            registry=r,
        )
        self.workload_prompt_tokens = Gauge(
            "tokenpilot_workload_prompt_tokens",
            "Prompt tokens per request the engines served: stat mean (exact) or p99 (the upper "
            "edge of the bucket holding it).",
            STAT,
            registry=r,
        )
        self.workload_output_tokens = Gauge(
            "tokenpilot_workload_output_tokens",
            "Output tokens per request the engines served: stat mean (exact) or p99 (the upper "
            "edge of the bucket holding it).",
            STAT,
            registry=r,
        )
        self.workload_mean_context_tokens = Gauge(
            "tokenpilot_workload_mean_context_tokens",
            "Mean context a decode attends: mean prompt plus half the mean output.",
            SERVICE,
            registry=r,
        )
        self.workload_arrival_rate = Gauge(
            "tokenpilot_workload_arrival_rate_per_second",
            "Requests per second over the learned workload's window.",
            SERVICE,
            registry=r,
        )
        self.workload_prefix_cache_hit_ratio = Gauge(
            "tokenpilot_workload_prefix_cache_hit_ratio",
            "Prompt tokens found in the prefix cache over those looked up.",
            SERVICE,
            registry=r,
        )
        self.retune_recommended_token_budget = Gauge(
            "tokenpilot_retune_recommended_token_budget",
            "The token budget the workload the engines served calls for, while it is "
            "recommended and not yet run (retune Advise, or Auto waiting).",
            SERVICE,
            registry=r,
        )
        self.retune_predicted_gain = Gauge(
            "tokenpilot_retune_predicted_gain",
            "Load per replica within the SLOs the recommended budget serves over the running "
            "one's (the capacity model, on the observed mix).",
            SERVICE,
            registry=r,
        )

    def record_decision(
        self, namespace: str, name: str, decision: Decision, evaluation_s: float
    ) -> None:
        self.desired_replicas.labels(namespace, name).set(decision.desired_replicas)
        self.ready_replicas.labels(namespace, name).set(decision.signals.ready_replicas)
        self.decisions.labels(
            namespace, name, decision.mode.value, decision.reason_code.value
        ).inc()
        self.evaluation_s.observe(evaluation_s)
        signals = decision.signals
        for gauge, value in (
            (self.queue_per_replica, signals.queue_per_replica),
            (self.itl_p99_s, signals.itl_p99_s),
            (self.ttft_p99_s, signals.ttft_p99_s),
        ):
            if value is None:
                self._drop(gauge, namespace, name)
            else:
                gauge.labels(namespace, name).set(value)

    def record_pool_decision(
        self,
        namespace: str,
        name: str,
        phase: str,
        decision: Decision,
        token_budget: int | None,
    ) -> None:
        """One pool's evaluation: its replicas, its engines' budget, the outcome."""
        self.pool_desired_replicas.labels(namespace, name, phase).set(decision.desired_replicas)
        self.pool_ready_replicas.labels(namespace, name, phase).set(decision.signals.ready_replicas)
        if token_budget is None:
            with contextlib.suppress(KeyError):
                self.pool_token_budget.remove(namespace, name, phase)
        else:
            self.pool_token_budget.labels(namespace, name, phase).set(token_budget)
        self.pool_decisions.labels(
            namespace, name, phase, decision.mode.value, decision.reason_code.value
        ).inc()

    def record_workload(
        self,
        namespace: str,
        name: str,
        workload: LearnedWorkload | None,
        recommendation: RetuneRecommendation | None,
    ) -> None:
        """What the engines served (status.workload) and the budget it calls for while it is
        recommended (status.tuning.recommendation); what is not known has no series."""
        figures: list[tuple[Gauge, float | None]] = [
            (self.workload_requests, None if workload is None else workload.num_requests),
            (
                self.workload_mean_context_tokens,
                None if workload is None else workload.mean_context_tokens,
            ),
            (
                self.workload_arrival_rate,
                None if workload is None else workload.arrival_rate_per_s,
            ),
            (
                self.workload_prefix_cache_hit_ratio,
                None if workload is None else workload.prefix_cache_hit_rate,
            ),
            (
                self.retune_recommended_token_budget,
                None if recommendation is None else recommendation.max_num_batched_tokens,
            ),
            (
                self.retune_predicted_gain,
                None if recommendation is None else recommendation.predicted_gain,
            ),
        ]
        for gauge, value in figures:
            if value is None:
                self._drop(gauge, namespace, name)
            else:
                gauge.labels(namespace, name).set(value)
        for family, tokens in (
            (self.workload_prompt_tokens, None if workload is None else workload.prompt),
            (self.workload_output_tokens, None if workload is None else workload.output),
        ):
            if tokens is None:
                self._drop_labelled(family, namespace, name)
            else:
                family.labels(namespace, name, "mean").set(tokens.mean)
                family.labels(namespace, name, "p99").set(tokens.p99)

    def forget_pools(self, namespace: str, name: str) -> None:
        """Remove a service's per-pool series (deleted, or joined again into one pool)."""
        for family in (
            self.pool_desired_replicas,
            self.pool_ready_replicas,
            self.pool_token_budget,
            self.pool_decisions,
        ):
            self._drop_labelled(family, namespace, name)

    def record_forecast_memory(self, namespace: str, name: str, memory_s: float) -> None:
        self.forecast_memory_s.labels(namespace, name).set(memory_s)

    def record_targets(
        self,
        namespace: str,
        name: str,
        *,
        min_replicas: int,
        max_replicas: int,
        attainment: float,
        itl_p99_s: float | None,
        ttft_p99_s: float | None,
        token_budget: int | None,
    ) -> None:
        """The service's bounds and objectives; an unset objective removes its series."""
        self.min_replicas.labels(namespace, name).set(min_replicas)
        self.max_replicas.labels(namespace, name).set(max_replicas)
        self.slo_attainment.labels(namespace, name).set(attainment)
        for gauge, value in (
            (self.slo_itl_p99_s, itl_p99_s),
            (self.slo_ttft_p99_s, ttft_p99_s),
            (self.token_budget, token_budget),
        ):
            if value is None:
                self._drop(gauge, namespace, name)
            else:
                gauge.labels(namespace, name).set(value)

    def record_pace(self, namespace: str, name: str, pace: float | None) -> None:
        """The engines' measured pace (core.autoscale.correction.measured_pace); None removes
        the series."""
        if pace is None:
            self._drop(self.engine_step_pace, namespace, name)
        else:
            self.engine_step_pace.labels(namespace, name).set(pace)

    def record_replica_cost(
        self, namespace: str, name: str, sku: str | None, usd_per_hour: float | None
    ) -> None:
        """One replica's hourly cost on `sku`; only the current SKU keeps a series."""
        key = (namespace, name)
        shown = self._cost_sku.get(key)
        if shown is not None and (usd_per_hour is None or shown != sku):
            with contextlib.suppress(KeyError):
                self.replica_hourly_cost.remove(namespace, name, shown)
            del self._cost_sku[key]
        if sku is not None and usd_per_hour is not None:
            self.replica_hourly_cost.labels(namespace, name, sku).set(usd_per_hour)
            self._cost_sku[key] = sku

    def forget(self, namespace: str, name: str) -> None:
        """Remove a deleted service's per-service series (the decisions counter included)."""
        for gauge in (
            self.desired_replicas,
            self.ready_replicas,
            self.min_replicas,
            self.max_replicas,
            self.token_budget,
            self.slo_itl_p99_s,
            self.slo_ttft_p99_s,
            self.slo_attainment,
            self.engine_step_pace,
            self.queue_per_replica,
            self.itl_p99_s,
            self.ttft_p99_s,
            self.forecast_memory_s,
            self.reconcile_errors,
            self.workload_requests,
            self.workload_mean_context_tokens,
            self.workload_arrival_rate,
            self.workload_prefix_cache_hit_ratio,
            self.retune_recommended_token_budget,
            self.retune_predicted_gain,
        ):
            self._drop(gauge, namespace, name)
        self._cost_sku.pop((namespace, name), None)
        self.forget_pools(namespace, name)
        for family in (
            self.decisions,
            self.replica_hourly_cost,
            self.workload_prompt_tokens,
            self.workload_output_tokens,
        ):
            self._drop_labelled(family, namespace, name)

    @staticmethod
    def _drop_labelled(family: Gauge | Counter, namespace: str, name: str) -> None:
        """Every series of `family` for the service, whatever its further labels."""
        for labels in list(family._metrics):
            if labels[:2] == (namespace, name):
                family.remove(*labels)

    @staticmethod
    def _drop(metric: Gauge | Counter, namespace: str, name: str) -> None:
        # remove() raises KeyError for a series that was never set; absent is what we want.
        with contextlib.suppress(KeyError):
            metric.remove(namespace, name)

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        """Serve /metrics on `address:port` from a daemon thread."""
        start_http_server(port, addr=address, registry=self.registry)
