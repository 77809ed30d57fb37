"""What every contender of `tokenpilot simulate` runs on, from the flags and the trace, and the
run of the chosen policies."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.llmservice import LLMService
from tokenpilot.api.model_shape import model_preset
from tokenpilot.api.vllm_defaults import vllm_batch_defaults
from tokenpilot.api.workload import WorkloadSpec
from tokenpilot.core.plan_inputs import with_workload
from tokenpilot.core.retune import hinted_plan
from tokenpilot.core.steptime import step_time_model
from tokenpilot.core.tuner import recommend
from tokenpilot.core.vllm_metrics import rendered_buckets
from tokenpilot_lab.commands.simulate.flags import engine_truth, parse_slo
from tokenpilot_lab.fleet import Balancer, FleetConfig, FleetResult
from tokenpilot_lab.fleet.compare import (
    OperatorServices,
    contenders,
    parse_policies,
    run_contenders,
)
from tokenpilot_lab.fleet.operator import RestartMemory
from tokenpilot_lab.fleet.results import nearest_rank
from tokenpilot_lab.fleet.service import ServiceTuning
from tokenpilot_lab.fleet.sizing import Sizing
from tokenpilot_lab.sim import EngineConfig, EngineTruth, ScaledPricer, StepTimer
from tokenpilot_lab.workload import (
    Trace,
)


def _trace_hints(args: argparse.Namespace, trace: Trace) -> WorkloadSpec:
    """spec.workload as a user who knows this trace would fill it in: its P99 prompt and mean
    context (a prompt and half its output), within maxModelLen."""
    prompts = sorted(r.num_prompt_tokens for r in trace.requests)
    contexts = [r.num_prompt_tokens + r.num_output_tokens / 2 for r in trace.requests]
    longest = args.max_model_len
    return WorkloadSpec(
        prompt_tokens_p99=min(longest, nearest_rank(prompts, 0.99)) if prompts else None,
        mean_context_tokens=(
            min(longest, max(1, round(sum(contexts) / len(contexts)))) if contexts else None
        ),
    )


def _service(
    args: argparse.Namespace,
    *,
    budget: int | None = None,
    seqs: int | None = None,
    hints: WorkloadSpec | None = None,
) -> LLMService:
    """The LLMService a user would write for this run: the model, the GPU, the SLOs, the
    engine's context and parallelism, the autoscaler's bounds; the batching integers and the
    workload hints only where given."""
    ttft_slo_s, itl_slo_s = parse_slo(args.slo)
    spec: dict[str, object] = {
        "model": {
            "name": args.model,
            "source": f"file:///models/{args.model}",
            "shape": {"preset": args.model},
        },
        "accelerator": {"sku": args.gpu},
        "engine": {
            "maxModelLen": args.max_model_len,
            "tensorParallelSize": args.tensor_parallel_size,
        },
        "slo": {"ttftP99": _ms(ttft_slo_s), "itlP99": _ms(itl_slo_s)},
        "autoscaling": {
            "enabled": True,
            "minReplicas": args.min_replicas,
            "maxReplicas": args.max_replicas,
        },
    }
    batching: dict[str, object] = {"profile": args.profile, "retune": args.retune}
    if budget is not None:
        batching["maxNumBatchedTokens"] = budget
    if seqs is not None:
        batching["maxNumSeqs"] = seqs
    spec["batching"] = batching
    if hints is not None:
        spec["workload"] = hints.model_dump(by_alias=True, exclude_none=True)
    return LLMService.model_validate(
        {
            "apiVersion": "serving.tokenpilot.dev/v1alpha1",
            "kind": "LLMService",
            "metadata": {"name": args.model, "namespace": "simulate", "generation": 1},
            "spec": spec,
        }
    )


def _ms(seconds: float) -> str:
    """A duration as the API writes it (`[0-9]+(.[0-9]+)?ms`)."""
    return f"{seconds * 1000:.3f}".rstrip("0").rstrip(".") + "ms"


@dataclass(frozen=True, slots=True)
class Setup:
    """What every contender runs on, from the flags and the trace: the fleet's bounds and SLOs,
    the services the operator contenders run and the engines each contender starts on, and
    the step models pricing them."""

    fleet: FleetConfig
    # The engines tokenpilot opens on: its spec's tuning, as the reconciler first plans it.
    tuned_engine: EngineConfig
    default_engine: EngineConfig
    timer: StepTimer
    tuned_from: str
    # What the engines run at; `timer` is what the profile, and so the operator, says.
    engine_timer: StepTimer
    # The hidden truth the engines run (None: the profile's price), before any slowdown.
    truth: EngineTruth | None = None
    services: OperatorServices | None = None
    # The +tuned baselines' engines: the budget `tokenpilot plan` gives for the trace's own
    # P99 prompt and mean context, as a user who knows their traffic would set it.
    planned_engine: EngineConfig | None = None
    planned_from: str = ""


def setup(args: argparse.Namespace, trace: Trace) -> Setup:
    ttft_slo_s, itl_slo_s = parse_slo(args.slo)
    profile = load_builtin_catalog().get(args.gpu)
    timer = step_time_model(profile, model_preset(args.model), args.tensor_parallel_size)
    known = _trace_hints(args, trace)
    budget = args.budget
    tokenpilot = _service(args, budget=budget, hints=known if args.workload_hints else None)
    defaults = vllm_batch_defaults(profile)
    services = OperatorServices(
        tokenpilot=tokenpilot,
        default_budget=_service(args, budget=defaults[0], seqs=defaults[1]),
        profile=profile,
    )
    opening = ServiceTuning.of(tokenpilot, profile)
    inputs = opening.inputs
    planned = recommend(with_workload(inputs, hinted_plan(known))).decision
    caching = args.enable_prefix_caching
    tuned_engine, default_engine, planned_engine = (
        EngineConfig.planned(
            inputs.capacity,
            max_num_batched_tokens=batching[0],
            max_num_seqs=batching[1],
            enable_prefix_caching=caching,
        )
        for batching in (
            opening.batching,
            defaults,
            (planned.token_budget, planned.max_num_seqs) if budget is None else opening.batching,
        )
    )
    fleet = FleetConfig(
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        initial_replicas=args.initial_replicas,
        cold_start_s=args.cold_start,
        scrape_interval_s=args.scrape_interval,
        gpus_per_replica=args.tensor_parallel_size,
        usd_per_gpu_hour=(
            profile.hourly_cost_usd if args.usd_per_gpu_hour is None else args.usd_per_gpu_hour
        ),
        ttft_slo_s=ttft_slo_s,
        itl_slo_s=itl_slo_s,
        balancer=Balancer(args.balancer),
        balancer_seed=args.seed,
        # The engines run the buckets the operator renders (core.render).
        engine_buckets=rendered_buckets(
            args.max_model_len, itl_p99_slo_s=itl_slo_s, ttft_p99_slo_s=ttft_slo_s
        ),
    )
    truth = engine_truth(args)
    truth_timer = timer if truth is None else truth.pricer(timer)
    engine_timer = (
        truth_timer
        if args.engine_slowdown == 1.0
        else ScaledPricer(truth_timer, args.engine_slowdown)
    )
    tuned_from = (
        "--budget"
        if budget is not None
        else f"the tuner, {args.profile}, for "
        + (
            "the trace's figures (--workload-hints)"
            if args.workload_hints
            else "the API's defaults"
        )
    )
    return Setup(
        fleet,
        tuned_engine,
        default_engine,
        timer,
        tuned_from,
        engine_timer,
        truth,
        services,
        planned_engine,
        planned_from=(
            "--budget"
            if budget is not None
            else f"the tuner, {args.profile}, for the trace's P99 prompt "
            f"{known.prompt_tokens_p99} and mean context {known.mean_context_tokens}"
        ),
    )


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
        planned_engine=world.planned_engine,
        timer=timer,
        model_timer=world.timer,
        services=world.services,
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
        "planned": ""
        if world.planned_engine is None
        else f"{world.planned_engine.max_num_batched_tokens} (from {world.planned_from}), "
        f"max_num_seqs {world.planned_engine.max_num_seqs}",
        "retune": args.retune,
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
