"""`tokenpilot simulate`: replay a trace through the fleet simulator under each policy.

Reads a trace (or generates one from a seed), sizes the static fleet and the baselines'
targets for the trace's peak, runs every chosen policy on the same requests, one after
another, and prints one table (or `--json`); `--plot` draws load, replicas and latency.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.llmservice import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_SEQS,
)
from tokenpilot.api.model_shape import MODEL_PRESETS, ModelShape, model_preset
from tokenpilot.api.units import ITL_P99, TTFT_P99
from tokenpilot.commands.tuner_flags import add_tuner_flags, workload_hints
from tokenpilot.core.capacity import plan_capacity
from tokenpilot.core.errors import TokenPilotError
from tokenpilot.core.plan_inputs import PlanInputs, ServiceLevel
from tokenpilot.core.profiles import GPUProfile
from tokenpilot.core.steptime import step_time_model
from tokenpilot.core.tuner import check_engine_slowdown, recommend, vllm_default_token_budget
from tokenpilot_lab.fleet import DEFAULT_COLD_START_S, FleetConfig, FleetResult
from tokenpilot_lab.fleet.compare import contenders, parse_policies, run_contenders
from tokenpilot_lab.fleet.config import DEFAULT_SCRAPE_INTERVAL_S
from tokenpilot_lab.fleet.operator import RestartMemory
from tokenpilot_lab.fleet.results import nearest_rank
from tokenpilot_lab.fleet.sizing import Sizing
from tokenpilot_lab.sim import EngineConfig, InvalidEngineConfig, ScaledPricer, StepTimer
from tokenpilot_lab.traces import mapping_from_spec, read_trace
from tokenpilot_lab.workload import (
    Trace,
    TraceError,
    bursts,
    diurnal,
    overlay,
    poisson,
    scale_rate,
    window,
)

# The table is rendered at a fixed width so the same run prints the same bytes everywhere.
TABLE_WIDTH = 144
SLO = "ttft=2s,itl=50ms"
# How issue 13 tells a load that varies from a flat one: prompt tokens per 5-minute window,
# the most over the fewest, under 2x is flat.
SWING_WINDOW_S = 300.0
FLAT_SWING = 2.0


def configure(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", type=Path, help="trace file: Azure CSV, Mooncake JSONL, ...")
    source.add_argument(
        "--synthetic",
        choices=("poisson", "bursts", "diurnal"),
        help="generate a trace instead (see --mean-rps, --duration, --seed)",
    )
    parser.add_argument(
        "--columns",
        help="field mapping for other CSV/JSONL traces: arrival=F,prompt=F,output=F[,unit=ms]",
    )
    parser.add_argument("--mean-rps", type=float, default=2.0, help="synthetic mean rate")
    parser.add_argument("--duration", type=float, default=600.0, help="synthetic span, seconds")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the synthetic trace and of --load's shifts"
    )
    parser.add_argument("--rate", default="x1", help="replay faster or slower, e.g. x2 or x0.5")
    parser.add_argument(
        "--load",
        default="x1",
        help="overlay N copies of the trace, each shifted by up to a few seconds (from --seed): "
        "N times the load over the same span, bursts N-fold, e.g. x8",
    )
    parser.add_argument("--from", dest="from_s", type=float, default=0.0, help="window start, s")
    parser.add_argument("--to", dest="to_s", type=float, default=None, help="window end, s")
    parser.add_argument("--gpu", default="H100-80GB", help="GPU profile name or alias")
    parser.add_argument(
        "--model", default="llama-3.1-8b", help=f"one of {', '.join(MODEL_PRESETS)}"
    )
    add_tuner_flags(parser)
    parser.add_argument(
        "--slo", default=SLO, help=f"e.g. {SLO} (the units and ranges of slo.ttftP99, slo.itlP99)"
    )
    parser.add_argument("--policy", default="all", help="all, or a comma list of policies")
    parser.add_argument(
        "--budget",
        type=int,
        help="token budget for the tokenpilot policy instead of the tuner's recommendation",
    )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="vLLM's automatic prefix caching (on by default, as in vLLM V1); hits need a "
        "trace with prefix hashes, such as Mooncake's hash_ids",
    )
    parser.add_argument(
        "--target-running",
        type=float,
        help="target per replica for every autoscaling baseline on both budgets: running "
        "requests for hpa and aibrix-kpa, requests in flight for keda (default: each "
        "measured by the sizing)",
    )
    parser.add_argument(
        "--baseline-targets",
        choices=("busiest", "steady"),
        help="how the autoscaling baselines' targets are measured, on one replica: 'busiest' "
        "replays the busiest 5 min faster until it misses 99 %% (default); 'steady' runs a "
        "load test of the same requests at a constant rate, as a fixed-rate benchmark would; "
        "not with --target-running, which sets the target itself",
    )
    parser.add_argument("--min-replicas", type=int, default=1)
    parser.add_argument("--max-replicas", type=int, default=64)
    parser.add_argument("--initial-replicas", type=int, help="Ready at t=0 (default: min)")
    parser.add_argument(
        "--cold-start",
        type=float,
        default=DEFAULT_COLD_START_S,
        help="seconds from scale-up to Ready",
    )
    parser.add_argument(
        "--operator-restarts",
        metavar="S[,S...]",
        help="seconds into the run at which the operator restarts (an upgrade, a standby's "
        "takeover): tokenpilot and vllm-default-budget start each service's autoscaler "
        "afresh from the memory the old process wrote, as a new process does, and keep "
        "their replicas",
    )
    parser.add_argument(
        "--operator-restart-memory",
        choices=[m.value for m in RestartMemory],
        default=RestartMemory.shutdown.value,
        help="what a restarted operator finds: the memory written as the old process stopped "
        "(shutdown, an upgrade; the default), its last periodic write (periodic, a process "
        "killed), or none (an operator with no namespace of its own)",
    )
    parser.add_argument(
        "--engine-slowdown",
        type=float,
        default=1.0,
        metavar="F",
        help="the simulated engines' steps take F times the step model's price, for every "
        "policy, while the operator's capacity model keeps the profile's price: a GPU profile "
        "that misprices its engines (default 1, a profile that prices them right)",
    )
    parser.add_argument("--scrape-interval", type=float, default=DEFAULT_SCRAPE_INTERVAL_S)
    parser.add_argument("--usd-per-gpu-hour", type=float, help="default: the GPU profile's")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--plot", type=Path, help="write a PNG of load, replicas, latency")


def restart_times(text: str | None) -> tuple[float, ...]:
    """`--operator-restarts`: a comma list of seconds, each finite and at least 0, sorted."""
    if not text:
        return ()
    try:
        values = tuple(sorted(float(part) for part in text.split(",")))
    except ValueError:
        raise ValueError(
            f"--operator-restarts {text!r}: give seconds into the run, comma-separated, "
            "e.g. 300,900"
        ) from None
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError(
            f"--operator-restarts {text!r}: each must be a finite number of seconds >= 0"
        )
    return values


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        check_flags(args)
        restarts_s = restart_times(args.operator_restarts)
        trace = load_trace(args)
        results, sizing, budgets = _simulate(args, trace, err, restarts_s)
    except (TraceError, TokenPilotError, InvalidEngineConfig, ValueError) as exc:
        # Bad input: the message names the file, line or flag and the fix.
        sys.stderr.write(f"error: {exc}\n")
        return 2
    if args.json:
        payload = to_json(
            trace,
            results,
            cold_start_s=args.cold_start,
            operator_restarts_s=restarts_s,
            engine_slowdown=args.engine_slowdown,
        )
        print(json.dumps(payload, sort_keys=False))
    else:
        sys.stdout.write(render_table(trace, results, sizing, budgets))
    if args.plot is not None:
        from tokenpilot_lab.fleet_plot import plot_comparison

        plot_comparison(trace, results, args.plot)
        err.print(f"plot written to {args.plot}", highlight=False)
    return 0


def check_flags(args: argparse.Namespace) -> None:
    """The numeric flags' ranges, checked before any work, each error naming its flag (the
    fleet's own checks, which stay the library's guard, speak of fields, not flags)."""
    at_least = [
        ("--min-replicas", args.min_replicas, 1.0),
        ("--cold-start", args.cold_start, 0.0),
        ("--usd-per-gpu-hour", args.usd_per_gpu_hour, 0.0),
    ]
    above_zero = [
        ("--scrape-interval", args.scrape_interval),
        ("--target-running", args.target_running),
    ]
    if args.synthetic is not None:
        above_zero += [("--mean-rps", args.mean_rps), ("--duration", args.duration)]
    check_engine_slowdown(args.engine_slowdown, "--engine-slowdown")
    for flag, value, low in at_least:
        if value is not None and not (math.isfinite(value) and value >= low):
            raise ValueError(f"{flag} {value:g}: must be a finite number >= {low:g}")
    for flag, value in above_zero:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{flag} {value:g}: must be a finite number > 0")
    if args.target_running is not None and args.baseline_targets is not None:
        raise ValueError(
            f"--baseline-targets {args.baseline_targets} with --target-running: the one sets how "
            "the targets are measured, the other sets them; drop one"
        )
    lo, hi, initial = args.min_replicas, args.max_replicas, args.initial_replicas
    if hi < lo:
        raise ValueError(f"--max-replicas {hi}: must be >= --min-replicas ({lo})")
    if initial is not None and not lo <= initial <= hi:
        raise ValueError(
            f"--initial-replicas {initial}: must lie within --min-replicas and --max-replicas "
            f"({lo} to {hi})"
        )


def load_trace(args: argparse.Namespace) -> Trace:
    """The trace the flags name: read or generated, windowed, overlaid, replayed at a rate."""
    if args.trace is not None:
        mapping = mapping_from_spec(args.columns) if args.columns else None
        trace = read_trace(args.trace, mapping)
    else:
        if args.synthetic == "poisson":
            trace = poisson(args.mean_rps, args.duration, seed=args.seed)
        elif args.synthetic == "bursts":
            trace = _bursts(args.mean_rps, args.duration, seed=args.seed)
        else:
            trace = _diurnal(args.mean_rps, args.duration, seed=args.seed)
    if args.from_s or args.to_s is not None:
        trace = window(trace, args.from_s, args.to_s)
    if not trace.requests:
        # Nothing to serve would score 100 % met; say so instead of printing a perfect table.
        raise TraceError(
            "no requests in the chosen span; widen --from/--to, or raise --mean-rps or --duration",
            source=trace.name,
        )
    copies = parse_load(args.load)
    if copies > 1:
        trace = overlay(trace, copies, seed=args.seed)
    factor = parse_rate(args.rate)
    return scale_rate(trace, factor) if factor != 1.0 else trace


def _bursts(mean_rps: float, duration_s: float, *, seed: int) -> Trace:
    # Quiet at half the mean, bursts at 5.5x the mean for a tenth of each 5 min: mean as asked.
    return bursts(mean_rps * 0.5, mean_rps * 5.5, duration_s, seed=seed)


def _diurnal(mean_rps: float, duration_s: float, *, seed: int) -> Trace:
    # One whole cycle over the run so a short run still sees a trough and a peak.
    return diurnal(mean_rps, duration_s, seed=seed, period_s=max(duration_s, 1.0))


def parse_rate(text: str) -> float:
    match = re.fullmatch(r"x?\s*([0-9]*\.?[0-9]+)", text.strip())
    if not match or float(match.group(1)) <= 0:
        raise TraceError(f"--rate {text!r}: expected a positive factor such as x2 or 0.5")
    return float(match.group(1))


def parse_load(text: str) -> int:
    match = re.fullmatch(r"x?\s*([0-9]+)", text.strip())
    if not match or int(match.group(1)) < 1:
        raise TraceError(
            f"--load {text!r}: expected a whole number of copies, at least 1, such as x8"
        )
    return int(match.group(1))


def parse_slo(text: str) -> tuple[float, float]:
    """`ttft=2s,itl=50ms` -> (ttft_s, itl_s); each value follows the API's rule for
    slo.ttftP99 and slo.itlP99, with the same words when it does not."""
    rules = {"ttft": TTFT_P99, "itl": ITL_P99}
    values: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if key not in rules or not sep:
            raise ValueError(f"--slo {text!r}: write ttft=<duration>,itl=<duration>, e.g. {SLO}")
        try:
            values[key] = rules[key].parse_s(value)
        except ValueError as exc:
            raise ValueError(f"--slo {text!r}: {key}: {exc}") from None
    if set(values) != set(rules):
        raise ValueError(f"--slo {text!r}: give both ttft and itl, e.g. {SLO}")
    return values["ttft"], values["itl"]


def _tuned(
    args: argparse.Namespace,
    trace: Trace,
    profile: GPUProfile,
    shape: ModelShape,
    slo: ServiceLevel,
) -> tuple[int, int, str]:
    """The tokenpilot policy's (token budget, max_num_seqs) and where they came from."""
    prompts = sorted(r.num_prompt_tokens for r in trace.requests)
    contexts = [r.num_prompt_tokens + r.num_output_tokens for r in trace.requests]
    hints = workload_hints(
        args,
        prompt_p99_tokens=min(args.max_model_len, nearest_rank(prompts, 0.99)) if prompts else None,
        expected_context_tokens=(
            min(args.max_model_len, max(1, round(sum(contexts) / len(contexts))))
            if contexts
            else None
        ),
        token_budget=args.budget,
    )
    decision = recommend(PlanInputs.of(profile, shape, slo, hints)).decision
    source = "--budget" if args.budget is not None else f"the tuner, {args.profile}"
    return decision.token_budget, decision.max_num_seqs, source


@dataclass(frozen=True, slots=True)
class Setup:
    """What every contender runs on, from the flags and the trace: the fleet's bounds and SLOs,
    the engines on the tuned and on vLLM's default budget, and the step model pricing them."""

    fleet: FleetConfig
    tuned_engine: EngineConfig
    default_engine: EngineConfig
    timer: StepTimer
    tuned_from: str
    # What the engines run at; `timer` is what the profile, and so the operator, says.
    engine_timer: StepTimer


def setup(args: argparse.Namespace, trace: Trace) -> Setup:
    ttft_slo_s, itl_slo_s = parse_slo(args.slo)
    profile = load_builtin_catalog().get(args.gpu)
    shape = model_preset(args.model)
    tp = args.tensor_parallel_size
    timer = step_time_model(profile, shape, tp)
    capacity = plan_capacity(profile, shape, tp, DEFAULT_GPU_MEMORY_UTILIZATION, args.max_model_len)
    slo = ServiceLevel(itl_p99_s=itl_slo_s, ttft_p99_s=ttft_slo_s)
    tuned_budget, tuned_seqs, tuned_from = _tuned(args, trace, profile, shape, slo)
    caching = args.enable_prefix_caching
    tuned_engine, default_engine = (
        EngineConfig.planned(
            capacity,
            max_num_batched_tokens=budget,
            max_num_seqs=seqs,
            enable_prefix_caching=caching,
        )
        for budget, seqs in (
            (tuned_budget, tuned_seqs),
            (vllm_default_token_budget(profile), DEFAULT_MAX_NUM_SEQS),
        )
    )
    fleet = FleetConfig(
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        initial_replicas=args.initial_replicas,
        cold_start_s=args.cold_start,
        scrape_interval_s=args.scrape_interval,
        gpus_per_replica=tp,
        usd_per_gpu_hour=(
            profile.hourly_cost_usd if args.usd_per_gpu_hour is None else args.usd_per_gpu_hour
        ),
        ttft_slo_s=ttft_slo_s,
        itl_slo_s=itl_slo_s,
    )
    engine_timer = (
        timer if args.engine_slowdown == 1.0 else ScaledPricer(timer, args.engine_slowdown)
    )
    return Setup(fleet, tuned_engine, default_engine, timer, tuned_from, engine_timer)


def _simulate(
    args: argparse.Namespace, trace: Trace, err: Console, restarts_s: tuple[float, ...] = ()
) -> tuple[list[FleetResult], Sizing | None, dict[str, str]]:
    names = parse_policies(args.policy)
    world = setup(args, trace)
    fleet, timer = world.fleet, world.engine_timer
    tuned_engine, default_engine = world.tuned_engine, world.default_engine
    entries, sizing = contenders(
        names,
        trace,
        fleet,
        tuned_engine=tuned_engine,
        default_engine=default_engine,
        timer=timer,
        model_timer=world.timer,
        target_running_per_replica=args.target_running,
        steady_targets=args.baseline_targets == "steady",
        model=args.model,
        operator_restarts_s=restarts_s,
        restart_memory=RestartMemory(args.operator_restart_memory),
    )
    show = sys.stderr.isatty() and not args.json
    with Progress(
        TextColumn("{task.description:<20}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not show,
    ) as bar:
        tasks = {e.name: bar.add_task(e.name, total=1.0) for e in entries}
        results = run_contenders(
            trace, entries, timer, lambda name, done: bar.update(tasks[name], completed=done)
        )
    budgets = {
        "cold_start": f"{fleet.cold_start_s:g} s from scale-up to Ready, for every policy",
        "restarts": ", ".join(f"{s:g} s" for s in restarts_s)
        + (f", memory {args.operator_restart_memory}" if restarts_s else ""),
        "prefix_cache": _prefix_cache_line(trace, args.enable_prefix_caching),
        "engines": ""
        if args.engine_slowdown == 1.0
        else f"steps take {args.engine_slowdown:g}x the step model's price for every policy; "
        "tokenpilot's capacity model prices them at 1x, as the profile does",
        "tuned": f"{tuned_engine.max_num_batched_tokens} (from {world.tuned_from}), "
        f"max_num_seqs {tuned_engine.max_num_seqs}",
        "default": f"{default_engine.max_num_batched_tokens}, "
        f"max_num_seqs {default_engine.max_num_seqs}",
        "start": ", ".join(
            sorted(
                {
                    f"{e.fleet.start_replicas} ({e.name})"
                    for e in entries
                    if not e.name.startswith("static-peak")
                }
            )
        ),
    }
    return results, sizing, budgets


def _prefix_cache_line(trace: Trace, enabled: bool) -> str:
    if not enabled:
        return "off (--no-enable-prefix-caching)"
    if trace.has_prefix_hashes:
        return (
            f"on, as vLLM's default; prompts share the prefixes the trace's hashes name (one "
            f"per {trace.hash_block_tokens} tokens)"
        )
    return "on, as vLLM's default; the trace has no prefix hashes, so no prompt shares one"


def _num(value: float | None, digits: int) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def to_json(
    trace: Trace,
    results: Sequence[FleetResult],
    *,
    cold_start_s: float,
    operator_restarts_s: Sequence[float] = (),
    engine_slowdown: float = 1.0,
) -> dict[str, object]:
    policies: dict[str, object] = {}
    for result in results:
        summary = result.summary()
        policies[result.policy] = {
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
    return {
        "trace": trace.name,
        "requests": trace.num_requests,
        "cold_start_s": cold_start_s,
        "operator_restarts_s": list(operator_restarts_s),
        "engine_slowdown": engine_slowdown,
        "prompt_tokens_per_5min_swing": _num(trace.prompt_tokens_swing(SWING_WINDOW_S), 3),
        "policies": policies,
    }


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
    console.print(
        f"  token budget: tokenpilot and the +tuned rows {budgets['tuned']}; the others "
        f"vLLM's default {budgets['default']}",
        highlight=False,
    )
    console.print(f"  load: {_swing_words(trace)}", highlight=False)
    console.print(f"  cold start: {budgets['cold_start']}", highlight=False)
    if budgets.get("engines"):
        console.print(f"  engines: {budgets['engines']}", highlight=False)
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
        for note in result.notes:
            console.print(f"  {result.policy}: {note}", highlight=False)
    text = console.export_text()
    return text if text.endswith("\n") else text + "\n"
