"""`tokenpilot simulate`'s report: one table, or one JSON object."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from tokenpilot_lab.fleet import DEFAULT_BALANCER, FleetResult
from tokenpilot_lab.fleet.results import Rollout
from tokenpilot_lab.fleet.sizing import Sizing
from tokenpilot_lab.sim import PROFILE_TRUTH, EngineTruth
from tokenpilot_lab.workload import (
    Trace,
)

# The table is rendered at a fixed width so the same run prints the same bytes everywhere.
TABLE_WIDTH = 144
# A load that varies against a flat one: prompt tokens per 5-minute window, the most over the
# fewest, under 2x is flat.
SWING_WINDOW_S = 300.0
FLAT_SWING = 2.0


def _num(value: float | None, digits: int) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def to_json(
    trace: Trace,
    results: Sequence[FleetResult],
    *,
    cold_start_s: float,
    operator_restarts_s: Sequence[float] = (),
    engine_slowdown: float = 1.0,
    engine_truth: EngineTruth | None = None,
    balancer: str = DEFAULT_BALANCER.value,
) -> dict[str, object]:
    policies: dict[str, object] = {}
    for result in results:
        summary = result.summary()
        row: dict[str, object] = {
            "attainment": round(result.attainment, 6),
            "goodput_rps": round(result.goodput_rps, 6),
            "ttft_p50_s": _num(summary["ttft_p50_s"], 6),
            "ttft_p99_s": _num(summary["ttft_p99_s"], 6),
            "itl_p50_s": _num(summary["itl_p50_s"], 6),
            "itl_p99_s": _num(summary["itl_p99_s"], 6),
            "gpu_hours": round(result.gpu_hours, 6),
            "cost_usd": round(result.cost_usd, 4),
            "scale_events": len(result.scale_events),
            "prefix_cache_hit_rate": _num(result.prefix_cache_hit_rate, 6),
        }
        policies[result.policy] = row
        if result.operator is not None:
            # What the operator was given (its spec's hints, or none), what it learned, and
            # each re-tune with the rollout it cost.
            row["operator"] = {
                **result.operator,
                "rollouts": [_rollout_json(r) for r in result.rollouts],
            }
    return {
        "trace": trace.name,
        "requests": trace.num_requests,
        "cold_start_s": cold_start_s,
        "operator_restarts_s": list(operator_restarts_s),
        "engine_slowdown": engine_slowdown,
        "engine_truth": (
            {"name": PROFILE_TRUTH, "changes": []}
            if engine_truth is None
            else {"name": engine_truth.name, "changes": list(engine_truth.changes())}
        ),
        "balancer": balancer,
        "prompt_tokens_per_5min_swing": _num(trace.prompt_tokens_swing(SWING_WINDOW_S), 3),
        "policies": policies,
    }


def _rollout_json(rollout: Rollout) -> dict[str, object]:
    return {
        "started_s": round(rollout.started_s, 3),
        "finished_s": _num(rollout.finished_s, 3),
        "from": list(rollout.from_batching),
        "to": list(rollout.to_batching),
        "surge_gpu_hours": round(rollout.surge_gpu_hours, 6),
    }


def _operator_lines(result: FleetResult) -> list[str]:
    """What an operator row knew and did, in words, under the table."""
    known = result.operator
    if known is None:
        return []
    hints = known.get("hints")
    lines = [
        f"spec.workload {hints}" if hints else "no workload hints in the spec",
    ]
    workload = known.get("workload")
    if workload:
        prompt = workload.get("promptTokens") or {}
        lines.append(
            f"learned over the last {workload.get('windowSeconds', 0):g} s: "
            f"{workload.get('requests', 0):g} requests, prompt mean {prompt.get('mean', '-')} "
            f"P99 {prompt.get('p99', '-')} tokens, mean context "
            f"{workload.get('meanContextTokens', '-')}"
        )
    costs = known.get("engine_costs")
    if costs:
        decode, prefill = costs.get("decodeStep") or {}, costs.get("prefill") or {}
        lines.append(
            f"engine costs over the profile's: decode step {decode.get('factor', '-')}x, "
            f"prefill {prefill.get('factor', '-')}x"
        )
    for retune, rollout in zip(known.get("retunes", ()), result.rollouts, strict=False):
        end = (
            "still rolling at the end"
            if rollout.finished_s is None
            else (f"rolled by {rollout.finished_s:,.0f} s")
        )
        lines.append(
            f"re-tuned at {retune['at_s']:,.0f} s: {retune['from']} -> {retune['to']} "
            f"(budget, max_num_seqs), {end}, surge {rollout.surge_gpu_hours:.2f} GPU-h"
        )
    recommendation = known.get("recommendation")
    if recommendation:
        lines.append(f"recommends {recommendation}")
    lines.append(f"ends on {known.get('batching')} (basis {known.get('basis')})")
    return lines


def _swing_words(trace: Trace) -> str:
    swing = trace.prompt_tokens_swing(SWING_WINDOW_S)
    whole = trace.num_whole_windows(SWING_WINDOW_S)
    if whole < 2:
        return "shorter than two 5-minute windows, so how much it varies is not measured"
    if swing is None:
        return "a 5-minute window without requests, so it varies without bound"
    return f"prompt tokens per 5 min vary {swing:.1f}x over its {whole} whole windows" + (
        " (flat: under 2x)" if swing < FLAT_SWING else ""
    )


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 1e3:,.0f}"


def render_table(
    trace: Trace,
    results: Sequence[FleetResult],
    sizing: Sizing | None,
    budgets: dict[str, str],
) -> str:
    console = Console(width=TABLE_WIDTH, record=True, file=io.StringIO(), color_system=None)
    console.print(
        f"{trace.name}: {trace.num_requests} requests over {trace.duration_s:,.0f} s",
        highlight=False,
    )
    planned = budgets.get("planned") or budgets["tuned"]
    console.print(
        f"  token budget: tokenpilot opens on {budgets['tuned']} and re-tunes as it learns "
        f"(retune {budgets.get('retune', 'Auto')}); the +tuned rows {planned}; the others "
        f"vLLM's default {budgets['default']}",
        highlight=False,
    )
    console.print(f"  load: {_swing_words(trace)}", highlight=False)
    console.print(f"  cold start: {budgets['cold_start']}", highlight=False)
    if budgets.get("engines"):
        console.print(f"  engines: {budgets['engines']}", highlight=False)
    if budgets.get("balancer"):
        console.print(f"  balancer: {budgets['balancer']}", highlight=False)
    if budgets.get("restarts"):
        console.print(
            f"  operator restarts at: {budgets['restarts']} (tokenpilot, vllm-default-budget: "
            "the autoscaler's state starts afresh from that memory)",
            highlight=False,
        )
    if budgets.get("prefix_cache"):
        console.print(f"  prefix cache: {budgets['prefix_cache']}", highlight=False)
    for note in trace.notes:
        console.print(f"  note: {note}", highlight=False)
    if budgets.get("start"):
        console.print(f"  replicas Ready at the start: {budgets['start']}", highlight=False)
    if sizing is not None:
        tuned = sizing.tuned_capacity
        console.print(
            f"  sizing: {sizing.reason}; the baselines' targets per replica "
            f"({sizing.target_basis}): default budget "
            f"{sizing.target_running_per_replica:g} running (hpa, aibrix-kpa target), "
            f"{sizing.target_in_flight_per_replica:g} in flight (keda threshold)"
            + (
                ""
                if tuned is None
                else f"; tuned budget {tuned.running_per_replica:g} running, "
                f"{tuned.in_flight_per_replica:g} in flight"
            )
            + (
                ""
                if sizing.tuned_static is None
                else f"; static-peak+tuned: {sizing.tuned_static.reason}"
            ),
            highlight=False,
        )
    table = Table(box=None, pad_edge=False)
    for header in (
        "policy",
        "requests",
        "SLO met",
        "goodput rps",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "ITL p50 ms",
        "ITL p99 ms",
        "GPU-h",
        "cost $",
        "scale events",
        "prefix hits",
    ):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for result in results:
        q = result.latency_quantiles()
        table.add_row(
            result.policy,
            f"{result.num_requests:,}",
            f"{result.attainment:.2%}",
            f"{result.goodput_rps:.3f}",
            _ms(q["ttft_p50_s"]),
            _ms(q["ttft_p99_s"]),
            _ms(q["itl_p50_s"]),
            _ms(q["itl_p99_s"]),
            f"{result.gpu_hours:.2f}",
            f"{result.cost_usd:.2f}",
            str(len(result.scale_events)),
            _pct(result.prefix_cache_hit_rate),
        )
    console.print(table)
    for result in results:
        for line in _operator_lines(result):
            console.print(f"  {result.policy}: {line}", highlight=False)
        for note in result.notes:
            console.print(f"  {result.policy}: {note}", highlight=False)
    text = console.export_text()
    return text if text.endswith("\n") else text + "\n"
