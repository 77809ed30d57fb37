"""The three dashboards: the fleet's SLOs, one service in detail, and the operator itself.

Every service-scoped query filters on the ``namespace`` and ``llmservice`` variables, and the SLO
panels read the recorded series of rules.py, so a dashboard and an alert can never disagree about
what "attainment" means.
"""

from __future__ import annotations

from tokenpilot.core.dashboards.grafana import Json, Panel, Target, dashboard
from tokenpilot.core.dashboards.rules import (
    ATTAINMENT_TARGET,
    BY_SERVICE,
    ITL,
    ON_SERVICE,
    PACE,
    SLIS,
    TTFT,
    burn_rate_series,
    error_ratio_series,
    good_series,
    p99_series,
    total_series,
)
from tokenpilot.core.dashboards.slo import BURN_ALERTS, Sli

SELECT = '{namespace=~"$namespace", llmservice=~"$llmservice"}'
SERVICE_LEGEND = "{{namespace}}/{{llmservice}}"
RATE = "5m"
LONG_WINDOW = "28d"


def _by_service(metric: str) -> str:
    return f"max {BY_SERVICE} ({metric}{SELECT})"


def _rate_by_service(counter: str) -> str:
    return f"sum {BY_SERVICE} (rate({counter}{SELECT}[{RATE}]))"


def _attainment_long(sli: Sli) -> str:
    good, total = good_series(sli), total_series(sli)
    return (
        f"sum_over_time({good}{SELECT}[{LONG_WINDOW}])"
        f" / sum_over_time({total}{SELECT}[{LONG_WINDOW}])"
    )


def _p99_panel(sli: Sli, legend: str) -> Panel:
    return Panel(
        title=f"P99 {sli.title} against the SLO",
        description=(
            f"P99 over {RATE} from vLLM's histogram (interpolated inside a bucket) and the"
            " target each LLMService declares in spec.slo."
        ),
        targets=(
            Target(f"{p99_series(sli)}{SELECT}", legend),
            Target(_by_service(sli.target_gauge), f"{legend} target"),
        ),
        unit="s",
    )


def fleet() -> Json:
    panels = [_p99_panel(sli, SERVICE_LEGEND) for sli in SLIS]
    for sli in SLIS:
        panels.append(
            Panel(
                title=f"{sli.key.upper()} attainment, 1 h",
                description=(
                    f"Share of each {sli.unit_of_event} at or under the target's bucket edge"
                    " over the last hour."
                ),
                targets=(Target(f"1 - {error_ratio_series(sli, '1h')}{SELECT}", SERVICE_LEGEND),),
                unit="percentunit",
                kind="stat",
                width=6,
            )
        )
        panels.append(
            Panel(
                title=f"{sli.key.upper()} attainment, 28 d",
                description="The same share over 28 days, traffic-weighted.",
                targets=(Target(_attainment_long(sli), SERVICE_LEGEND),),
                unit="percentunit",
                kind="stat",
                width=6,
            )
        )
    panels.append(
        Panel(
            title="Error budget left, 28 d",
            description=(
                "1 - (bad share / allowed bad share), with the allowed share"
                " 1 - spec.slo attainment target. Below zero the SLO is broken for the period."
            ),
            targets=tuple(
                Target(
                    f"1 - (1 - {_attainment_long(sli)})"
                    f" / {ON_SERVICE} (1 - {_by_service(ATTAINMENT_TARGET)})",
                    f"{SERVICE_LEGEND} {sli.key.upper()}",
                )
                for sli in SLIS
            ),
            unit="percentunit",
            kind="stat",
            width=12,
        )
    )
    burn_thresholds = tuple(
        sorted(
            (alert.factor, "red" if alert.speed == "Fast" else "orange") for alert in BURN_ALERTS
        )
    )
    panels.append(
        Panel(
            title="Error budget burn rate",
            description=(
                "How many times faster than sustainable the budget is spent; the alerts fire at"
                " 14.4x over 1 h and 5 m, and at 6x over 6 h and 30 m."
            ),
            targets=tuple(
                Target(
                    f"{burn_rate_series(sli, window)}{SELECT}",
                    f"{SERVICE_LEGEND} {sli.key.upper()} {window}",
                )
                for sli in SLIS
                for window in ("1h", "6h")
            ),
            thresholds=burn_thresholds,
        )
    )
    return dashboard(
        "tokenpilot-fleet",
        "TokenPilot / Fleet SLOs",
        "P99 ITL and TTFT of every LLMService against its SLO, attainment and error budget.",
        panels,
        service_multi=True,
    )


def service() -> Json:
    per_iteration = f"sum {BY_SERVICE} (rate(vllm:iteration_tokens_total_count{SELECT}[{RATE}]))"
    decode_per_iteration = (
        f"{_rate_by_service('vllm:generation_tokens_total')} / {ON_SERVICE} {per_iteration}"
    )
    total_per_iteration = (
        f"{_rate_by_service('vllm:iteration_tokens_total_sum')} / {ON_SERVICE} {per_iteration}"
    )
    panels = [
        _p99_panel(ITL, "P99"),
        _p99_panel(TTFT, "P99"),
        Panel(
            title="Requests waiting and running",
            description="Summed over the service's engines; waiting is the queue the autoscaler"
            " watches.",
            targets=(
                Target(f"sum {BY_SERVICE} (vllm:num_requests_waiting{SELECT})", "waiting"),
                Target(f"sum {BY_SERVICE} (vllm:num_requests_running{SELECT})", "running"),
            ),
        ),
        Panel(
            title="Replicas: desired, ready, reporting",
            description="Desired is the autoscaler's last decision; ready is the Deployment's"
            " ready replicas; reporting counts engines Prometheus scrapes.",
            targets=(
                Target(_by_service("tokenpilot_desired_replicas"), "desired"),
                Target(_by_service("tokenpilot_ready_replicas"), "ready"),
                Target(f"count {BY_SERVICE} (vllm:num_requests_running{SELECT})", "reporting"),
            ),
        ),
        Panel(
            title="Tokens per iteration: prefill, decode and the budget",
            description=(
                "Mean tokens per engine step from vllm:iteration_tokens_total; decode is one"
                " token per running sequence (generated tokens per step), prefill the rest."
                " Steps whose prefill overflows the budget are the ones that stall decodes."
            ),
            targets=(
                Target(f"{total_per_iteration} - {ON_SERVICE} ({decode_per_iteration})", "prefill"),
                Target(decode_per_iteration, "decode"),
                Target(_by_service("tokenpilot_token_budget"), "token budget"),
            ),
        ),
        Panel(
            title="KV cache usage",
            description="Fraction of KV blocks in use on each engine; near 1 means preemptions.",
            targets=(
                Target(f"max by (instance) (vllm:kv_cache_usage_perc{SELECT})", "{{instance}}"),
            ),
            unit="percentunit",
            thresholds=((0.9, "orange"), (0.98, "red")),
        ),
        Panel(
            title="Preemptions per second",
            description="Sequences evicted to free KV blocks, recomputed later.",
            targets=(Target(_rate_by_service("vllm:num_preemptions_total"), "preemptions"),),
        ),
        Panel(
            title="Tokens per second",
            description="Prompt tokens processed and tokens generated across the service.",
            targets=(
                Target(_rate_by_service("vllm:prompt_tokens_total"), "prompt"),
                Target(_rate_by_service("vllm:generation_tokens_total"), "generated"),
            ),
        ),
        Panel(
            title="Cost per million generated tokens",
            description=(
                "Ready replicas times each replica's hourly cost (the GPU profile's hourly cost"
                " times GPUs per replica), over the generated tokens of the same hour."
            ),
            targets=(
                Target(
                    f"{_by_service('tokenpilot_replica_hourly_cost_dollars')}"
                    f" * {ON_SERVICE} {_by_service('tokenpilot_ready_replicas')}"
                    f" / {ON_SERVICE} ({_rate_by_service('vllm:generation_tokens_total')}"
                    " * 3600 / 1e6)",
                    "USD per 1M tokens",
                ),
            ),
            unit="currencyUSD",
        ),
        Panel(
            title="Finished requests per second",
            description="By the reason vLLM reports (stop, length, abort).",
            targets=(
                Target(
                    f"sum by (finished_reason) (rate(vllm:request_success_total{SELECT}[{RATE}]))",
                    "{{finished_reason}}",
                ),
            ),
            unit="reqps",
        ),
    ]
    return dashboard(
        "tokenpilot-service",
        "TokenPilot / LLMService",
        "One LLMService: SLOs, queue, replicas, token budget, KV cache, throughput and cost.",
        panels,
        service_multi=False,
    )


def operator() -> Json:
    panels = [
        Panel(
            title="Autoscaler decisions by reason",
            description="Decisions per 5 minutes, by the reason the autoscaler gave.",
            targets=(
                Target(
                    f"sum by (reason) (increase(tokenpilot_decisions_total{SELECT}[{RATE}]))",
                    "{{reason}}",
                ),
            ),
        ),
        Panel(
            title="Evaluation latency",
            description="Time for one autoscaler evaluation: read metrics, decide, write.",
            targets=tuple(
                Target(
                    f"histogram_quantile({q}, sum by (le)"
                    f" (rate(tokenpilot_evaluation_duration_seconds_bucket[{RATE}])))",
                    f"P{round(q * 100)}",
                )
                for q in (0.5, 0.99)
            ),
            unit="s",
        ),
        Panel(
            title="Reconcile errors",
            description="Errors per 5 minutes while reconciling each LLMService.",
            targets=(
                Target(
                    f"sum {BY_SERVICE} (increase(tokenpilot_reconcile_errors_total{SELECT}"
                    f"[{RATE}]))",
                    SERVICE_LEGEND,
                ),
            ),
        ),
        Panel(
            title="Desired replicas and the maximum",
            description="Per service; a line that sits on its maximum is an autoscaler at max.",
            targets=(
                Target(_by_service("tokenpilot_desired_replicas"), f"{SERVICE_LEGEND} desired"),
                Target(_by_service("tokenpilot_max_replicas"), f"{SERVICE_LEGEND} max"),
            ),
        ),
        Panel(
            title="Engine step pace against the GPU profile",
            description=(
                "The engines' mean step over the step model's price of their load: 1 is the"
                " profile's pace; above 1.1 the autoscaler sizes the fleet at the measured pace"
                " and, after 30 minutes, TokenPilotEnginesSlowerThanProfile fires."
            ),
            targets=(Target(_by_service(PACE), SERVICE_LEGEND),),
        ),
    ]
    return dashboard(
        "tokenpilot-operator",
        "TokenPilot / Operator",
        "The operator itself: autoscaler decisions, evaluation latency and reconcile errors.",
        panels,
        service_multi=True,
    )


def all_dashboards() -> dict[str, Json]:
    """File stem -> dashboard model."""
    return {"fleet": fleet(), "service": service(), "operator": operator()}
