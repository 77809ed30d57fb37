"""What every contender of `tokenpilot simulate` runs on, from the flags and the trace, and the
run of the chosen policies."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import DEFAULT_GPU_MEMORY_UTILIZATION
from tokenpilot.api.model_shape import ModelShape, model_preset
from tokenpilot.api.vllm_defaults import vllm_batch_defaults
from tokenpilot.commands.tuner_flags import workload_hints
from tokenpilot.core.capacity import plan_capacity
from tokenpilot.core.plan_inputs import PlanInputs, ServiceLevel
from tokenpilot.core.steptime import step_time_model
from tokenpilot.core.tuner import recommend
from tokenpilot_lab.commands.simulate.flags import engine_truth, parse_slo
from tokenpilot_lab.fleet import Balancer, FleetConfig, FleetResult
from tokenpilot_lab.fleet.compare import contenders, parse_policies, run_contenders
from tokenpilot_lab.fleet.operator import RestartMemory
from tokenpilot_lab.fleet.results import nearest_rank
from tokenpilot_lab.fleet.sizing import Sizing
from tokenpilot_lab.sim import EngineConfig, EngineTruth, ScaledPricer, StepTimer
from tokenpilot_lab.workload import (
    Trace,
)


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
    # The hidden truth the engines run (None: the profile's price), before any slowdown.
    truth: EngineTruth | None = None


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
            vllm_batch_defaults(profile),
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
        balancer=Balancer(args.balancer),
        balancer_seed=args.seed,
    )
    truth = engine_truth(args)
    truth_timer = timer if truth is None else truth.pricer(timer)
    engine_timer = (
        truth_timer
        if args.engine_slowdown == 1.0
        else ScaledPricer(truth_timer, args.engine_slowdown)
    )
    return Setup(fleet, tuned_engine, default_engine, timer, tuned_from, engine_timer, truth)


def run_policies(
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
        "engines": _engines_line(world.truth, args.engine_slowdown),
        "balancer": _balancer_line(fleet),
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


def _engines_line(truth: EngineTruth | None, slowdown: float) -> str:
    slower = "" if slowdown == 1.0 else f", every step {slowdown:g}x that price"
    if truth is None:
        if slowdown == 1.0:
            return "at the GPU profile's step model, the price tokenpilot's capacity model uses"
        return (
            f"steps take {slowdown:g}x the step model's price for every policy; tokenpilot's "
            "capacity model prices them at 1x, as the profile does"
        )
    return (
        f"hidden truth {truth.describe()}{slower}, for every policy; tokenpilot's capacity "
        "model prices steps as the GPU profile does"
    )


def _balancer_line(fleet: FleetConfig) -> str:
    if fleet.balancer is Balancer.service:
        return (
            "service (kube-proxy: a random Ready replica per connection, seeded from --seed "
            f"{fleet.balancer_seed}), for every policy and sizing run"
        )
    return (
        "least-request (the Ready replica with the fewest requests in flight), for every "
        "policy and sizing run"
    )


def _prefix_cache_line(trace: Trace, enabled: bool) -> str:
    if not enabled:
        return "off (--no-enable-prefix-caching)"
    if trace.has_prefix_hashes:
        return (
            f"on, as vLLM's default; prompts share the prefixes the trace's hashes name (one "
            f"per {trace.hash_block_tokens} tokens)"
        )
    return "on, as vLLM's default; the trace has no prefix hashes, so no prompt shares one"
