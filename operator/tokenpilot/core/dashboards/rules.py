"""Prometheus rule groups as data: SLO recording rules, burn-rate alerts and operator alerts.

Recorded series follow ``level:metric:operation`` naming and always carry exactly the labels
``namespace`` and ``llmservice``:

- ``tokenpilot:<sli>_p99_seconds:rate5m``: the P99 from the vLLM histogram over 5 minutes;
- ``tokenpilot:<sli>_good:rate5m`` and ``tokenpilot:<sli>_total:rate5m``: observations per second
  at or under the service's target (counted at a bucket edge, see slo.py) and in all;
- ``tokenpilot:<sli>_error_ratio:rate<w>``: the bad fraction over each window. Windows longer than
  5 minutes average the 5-minute rates with ``sum_over_time`` instead of re-reading every bucket,
  which keeps the long windows cheap and weights each interval by its traffic;
- ``tokenpilot:<sli>_burn_rate:rate<w>``: the error ratio over the error budget
  (1 - the attainment target), the figure the alerts compare with 14.4 and 6.

The per-service target is a label-free number in an operator gauge, but a histogram bucket is
picked by a label (``le``). PromQL cannot turn a number into a label, so the good-count rule lists
every bucket edge once, each guarded by the range of targets that round to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenpilot.core import vllm_metrics
from tokenpilot.core.autoscale.correction import PACE_TOLERANCE
from tokenpilot.core.dashboards.slo import (
    BASE_WINDOW,
    BURN_ALERTS,
    RATIO_WINDOWS,
    SERVICE_LABELS,
    Sli,
    le_label,
)

Rule = dict[str, Any]
RuleGroup = dict[str, Any]

BY_SERVICE = "by (" + ", ".join(SERVICE_LABELS) + ")"
ON_SERVICE = "on (" + ", ".join(SERVICE_LABELS) + ")"

ITL = Sli(
    key="itl",
    title="inter-token latency",
    histogram=vllm_metrics.INTER_TOKEN_LATENCY_SECONDS,
    target_gauge="tokenpilot_slo_itl_p99_seconds",
    unit_of_event="inter-token interval",
)
TTFT = Sli(
    key="ttft",
    title="time to first token",
    histogram=vllm_metrics.TIME_TO_FIRST_TOKEN_SECONDS,
    target_gauge="tokenpilot_slo_ttft_p99_seconds",
    unit_of_event="request",
)
SLIS: tuple[Sli, ...] = (ITL, TTFT)

ATTAINMENT_TARGET = "tokenpilot_slo_attainment_target"
# The engines' measured step over the step model's price (core.autoscale.correction).
PACE = "tokenpilot_engine_step_pace_ratio"
# Repo-relative: the alert text points at the section of the docs that says what to do.
RUNBOOK = "docs/observability.md"


def p99_series(sli: Sli) -> str:
    return f"tokenpilot:{sli.key}_p99_seconds:rate{BASE_WINDOW}"


def good_series(sli: Sli) -> str:
    return f"tokenpilot:{sli.key}_good:rate{BASE_WINDOW}"


def total_series(sli: Sli) -> str:
    return f"tokenpilot:{sli.key}_total:rate{BASE_WINDOW}"


def error_ratio_series(sli: Sli, window: str) -> str:
    return f"tokenpilot:{sli.key}_error_ratio:rate{window}"


def burn_rate_series(sli: Sli, window: str) -> str:
    return f"tokenpilot:{sli.key}_burn_rate:rate{window}"


def per_service(expression: str) -> str:
    """One series per service from a gauge the operator may export with extra labels."""
    return f"max {BY_SERVICE} ({expression})"


def _good_rate(sli: Sli, edges_s: Sequence[float]) -> str:
    finite = sorted(e for e in edges_s if e != float("inf"))
    target = per_service(sli.target_gauge)
    clauses = []
    for index, edge in enumerate(finite):
        condition = target
        if index > 0:  # the smallest edge also stands for every target below it
            condition += f" >= {edge:g}"
        if index < len(finite) - 1:
            condition += f" < {finite[index + 1]:g}"
        bucket = f'{sli.histogram}_bucket{{le="{le_label(edge)}"}}'
        clauses.append(
            f"(sum {BY_SERVICE} (rate({bucket}[{BASE_WINDOW}])) and {ON_SERVICE} ({condition}))"
        )
    return "\nor\n".join(clauses) + "\n"


def _error_ratio(sli: Sli, window: str) -> str:
    if window == BASE_WINDOW:
        return f"1 - {good_series(sli)} / {total_series(sli)}"
    return (
        f"1 - sum_over_time({good_series(sli)}[{window}])"
        f" / sum_over_time({total_series(sli)}[{window}])"
    )


def recording_rules(sli: Sli, edges_s: Sequence[float]) -> list[Rule]:
    rules: list[Rule] = [
        {
            "record": p99_series(sli),
            "expr": (
                f"histogram_quantile(0.99, sum by ({', '.join(SERVICE_LABELS)}, le)"
                f" (rate({sli.histogram}_bucket[{BASE_WINDOW}])))"
            ),
        },
        {
            "record": total_series(sli),
            "expr": f"sum {BY_SERVICE} (rate({sli.histogram}_count[{BASE_WINDOW}]))",
        },
        {"record": good_series(sli), "expr": _good_rate(sli, edges_s)},
    ]
    for window in RATIO_WINDOWS:
        rules.append({"record": error_ratio_series(sli, window), "expr": _error_ratio(sli, window)})
    for window in RATIO_WINDOWS:
        rules.append(
            {
                "record": burn_rate_series(sli, window),
                "expr": (
                    f"{error_ratio_series(sli, window)}"
                    f" / {ON_SERVICE} (1 - {per_service(ATTAINMENT_TARGET)})"
                ),
            }
        )
    return rules


def _burn_alerts(sli: Sli) -> list[Rule]:
    alerts: list[Rule] = []
    name = sli.key.upper()
    for condition in BURN_ALERTS:
        long_series = burn_rate_series(sli, condition.long_window)
        short_series = burn_rate_series(sli, condition.short_window)
        alerts.append(
            {
                "alert": f"TokenPilot{name}ErrorBudgetBurn{condition.speed}",
                "expr": (
                    f"{long_series} > {condition.factor:g}"
                    f" and {ON_SERVICE} {short_series} > {condition.factor:g}"
                ),
                "for": condition.for_duration,
                "labels": {"severity": "page", "slo": sli.key},
                "annotations": {
                    "summary": (
                        "{{ $labels.namespace }}/{{ $labels.llmservice }}: "
                        f"{sli.key.upper()} error budget burning {condition.factor:g}x too fast"
                    ),
                    "description": (
                        f"Over both {condition.long_window} and {condition.short_window}, too many"
                        f" of its {sli.unit_of_event}s missed the P99 {sli.title} target. Add"
                        " replicas (is the autoscaler at maxReplicas?) or lower the token budget."
                    ),
                    "runbook": f"{RUNBOOK}#error-budget-burn",
                },
            }
        )
    return alerts


def _operator_alerts() -> list[Rule]:
    return [
        {
            "alert": "TokenPilotReconcileErrors",
            "expr": (f"sum {BY_SERVICE} (increase(tokenpilot_reconcile_errors_total[10m])) > 0"),
            "for": "15m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": (
                    "The operator keeps failing to reconcile"
                    " {{ $labels.namespace }}/{{ $labels.llmservice }}"
                ),
                "description": (
                    "Reconcile errors for 15 minutes in a row. `kubectl describe llms"
                    " {{ $labels.llmservice }} -n {{ $labels.namespace }}` shows the condition"
                    " and the last event with the cause."
                ),
                "runbook": f"{RUNBOOK}#reconcile-errors",
            },
        },
        {
            "alert": "TokenPilotAutoscalerAtMax",
            "expr": (
                f"{per_service('tokenpilot_desired_replicas')}"
                f" >= {ON_SERVICE} {per_service('tokenpilot_max_replicas')}"
            ),
            "for": "30m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": (
                    "{{ $labels.namespace }}/{{ $labels.llmservice }} has wanted maxReplicas"
                    " for 30 minutes"
                ),
                "description": (
                    "The autoscaler cannot add capacity: the SLO is at risk on the next burst."
                    " Raise spec.autoscaling.maxReplicas or check GPU quota."
                ),
                "runbook": f"{RUNBOOK}#autoscaler-at-max",
            },
        },
        {
            "alert": "TokenPilotEnginesSlowerThanProfile",
            "expr": f"{per_service(PACE)} > {1.0 + PACE_TOLERANCE:g}",
            "for": "30m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": (
                    "{{ $labels.namespace }}/{{ $labels.llmservice }}'s engines run"
                    ' {{ $value | printf "%.2f" }}x slower than their GPU profile says'
                ),
                "description": (
                    "For 30 minutes the engines' steps took longer than the step model prices"
                    " them: the autoscaler buys the replicas that pace needs, and a token budget"
                    " tuned on the profile may break the ITL target. `kubectl describe llms"
                    " {{ $labels.llmservice }} -n {{ $labels.namespace }}` shows the"
                    " PaceAsProfiled condition with the fix: recalibrate the GPU, or plan the"
                    " budget at this pace."
                ),
                "runbook": f"{RUNBOOK}#engines-slower-than-profile",
            },
        },
        {
            "alert": "TokenPilotEngineMetricsMissing",
            "expr": (
                f"{per_service('tokenpilot_desired_replicas')} > 0"
                f" unless {ON_SERVICE} {per_service('vllm:num_requests_running')}"
            ),
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": (
                    "No engine metrics for {{ $labels.namespace }}/{{ $labels.llmservice }}"
                ),
                "description": (
                    "The operator wants replicas but Prometheus has no vllm: series for the"
                    " service: the autoscaler holds still and the SLO panels are blank. Check the"
                    " ServiceMonitor, the engine pods' /metrics and the llmservice target label."
                ),
                "runbook": f"{RUNBOOK}#engine-metrics-missing",
            },
        },
    ]


def rule_groups(itl_edges_s: Sequence[float], ttft_edges_s: Sequence[float]) -> list[RuleGroup]:
    """Every rule group, given the bucket edges of vLLM's ITL and TTFT histograms."""
    edges = {ITL.key: itl_edges_s, TTFT.key: ttft_edges_s}
    recording = [rule for sli in SLIS for rule in recording_rules(sli, edges[sli.key])]
    burn = [alert for sli in SLIS for alert in _burn_alerts(sli)]
    return [
        {"name": "tokenpilot-slo-recording", "interval": "30s", "rules": recording},
        {"name": "tokenpilot-slo-alerts", "rules": burn},
        {"name": "tokenpilot-operator-alerts", "rules": _operator_alerts()},
    ]
