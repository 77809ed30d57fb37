r"""One service with prefill and decode apart, against the same service aggregated.

On one trace it runs, on the same SLOs, engines' settings and balancer:

- every aggregated contender of `tokenpilot simulate` (`--policy`, default all: tokenpilot and
  each baseline, on the tuned and on vLLM's default budget) on `--aggregated-gpu` (default the
  prefill GPU), through `tokenpilot simulate`'s own path;
- `split, <GPU> decode`: a prefill pool on `--prefill-gpu` and a decode pool on each of
  `--decode-gpu`, each at the budget `core.disaggregation.plan_phases` gives it, scaled by the
  operator's autoscaler on each pool (fleet.disagg_compare), the KV hand-off priced over
  `--kv-link-gbps`.

The engines of every contender are priced alike: `tokenpilot simulate`'s `--engine-truth` and
`--engine-slowdown` apply to the split's pools as to the aggregated fleets (the operator plans
with the profiles either way), and `--true-kv-link-gbps` is the network the hand-off really
crosses when it is slower (or faster) than the `--kv-link-gbps` the operator plans with.

The table gives, per contender, the share of requests meeting both SLOs, the same share among
the requests whose prompt the prefill GPU could prefill within the TTFT SLO at its datasheet
floor (all of it in one step at peak FLOPS and bandwidth: those no deployment on it can serve
are counted apart), GPU-hours and cost at each GPU's list price (fleet/gpu_prices.yaml), and
`tokenpilot plan`'s verdict for the trace's workload (`core.disaggregation.verdict`).

    python bench/disaggregated_fleet.py --prefill-gpu H100-80GB --decode-gpu H100-80GB -- \
        --synthetic poisson --mean-rps 2 --duration 1800 --median-prompt 8192 \
        --slo ttft=2s,itl=50ms --max-model-len 131072
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time

from rich.console import Console

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.core.disaggregation import (
    DEFAULT_KV_LINK,
    KvLink,
    PhaseWorkload,
    at_batching,
    plan_phases,
    verdict,
)
from tokenpilot.core.plan_inputs import plan_inputs
from tokenpilot.core.roofline import PrefillChunk, step_floor_s
from tokenpilot.core.steptime import step_time_model
from tokenpilot_lab.commands.simulate import flags as simulate_flags
from tokenpilot_lab.commands.simulate import world as simulate_world
from tokenpilot_lab.commands.simulate.pools import list_prices
from tokenpilot_lab.fleet import FleetResult
from tokenpilot_lab.fleet.disagg_compare import (
    DisaggregatedRun,
    run_disaggregated,
    with_tensor_parallel,
)
from tokenpilot_lab.fleet.results import nearest_rank


def main(argv: list[str]) -> int:
    ours = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ours.add_argument("--prefill-gpu", default="H100-80GB")
    ours.add_argument(
        "--decode-gpu", default="H100-80GB", help="the decode pool's GPU, or a comma list"
    )
    ours.add_argument("--aggregated-gpu", help="default: the prefill GPU")
    ours.add_argument("--kv-link-gbps", type=float, default=DEFAULT_KV_LINK.gbps)
    ours.add_argument(
        "--true-kv-link-gbps",
        type=float,
        help="the link the hand-off really runs over (default: --kv-link-gbps, as planned)",
    )
    ours.add_argument("--prefill-tp", type=int, default=1, help="GPUs per prefill replica")
    ours.add_argument("--decode-tp", type=int, default=1, help="GPUs per decode replica")
    ours.add_argument("--pool-max", type=int, default=64, help="each pool's maxReplicas")
    ours.add_argument("--json", action="store_true", help="also print the rows as JSON")
    split = argv.index("--") if "--" in argv else len(argv)
    args = ours.parse_args(argv[:split])
    flags = argparse.ArgumentParser()
    simulate_flags.configure(flags)
    sim_args = flags.parse_args(argv[split + 1 :])
    link = (
        DEFAULT_KV_LINK
        if args.kv_link_gbps == DEFAULT_KV_LINK.gbps
        else KvLink(args.kv_link_gbps, "--kv-link-gbps")
    )
    catalog = load_builtin_catalog()
    prices = {sku: usd for sku, (usd, _) in list_prices().items()}
    aggregated_gpu = args.aggregated_gpu or args.prefill_gpu
    started = time.perf_counter()
    trace = simulate_flags.load_trace(sim_args)

    agg_args = copy.copy(sim_args)
    agg_args.gpu = aggregated_gpu
    agg_args.usd_per_gpu_hour = prices[catalog.get(aggregated_gpu).name]
    agg_args.max_replicas = args.pool_max
    quiet = Console(stderr=True, quiet=True)
    results, _, budgets = simulate_world.run_policies(agg_args, trace, quiet)
    for r in results:
        _progress(started, r.policy, r)

    world = simulate_world.setup(agg_args, trace)
    # The spec a user writes: `tokenpilot simulate`'s, re-tune as its --retune says (Auto).
    spec = simulate_world._service(agg_args).spec
    prefill = catalog.get(args.prefill_gpu)
    bounds = ((1, args.pool_max), (1, args.pool_max))
    runs = []
    for decode_gpu in (g.strip() for g in args.decode_gpu.split(",") if g.strip()):
        decode = catalog.get(decode_gpu)
        run = run_disaggregated(
            trace,
            world.fleet,
            spec,
            (prefill, decode),
            (prices[prefill.name], prices[decode.name]),
            bounds,
            link,
            tensor_parallel=(args.prefill_tp, args.decode_tp),
            enable_prefix_caching=sim_args.enable_prefix_caching,
            truth=simulate_flags.engine_truth(sim_args),
            engine_slowdown=sim_args.engine_slowdown,
            true_link=None
            if args.true_kv_link_gbps is None
            else KvLink(args.true_kv_link_gbps, "--true-kv-link-gbps"),
        )
        runs.append(run)
        _progress(started, f"split, {decode.name} decode", run.pooled.result)

    floor_ok = _servable(trace, spec, prefill, args.prefill_tp, world.fleet.ttft_slo_s)
    workload = _workload(trace)
    aggregated = plan_inputs(spec, catalog.get(aggregated_gpu))
    prefill_inputs = plan_inputs(with_tensor_parallel(spec, args.prefill_tp), prefill)
    rows: list[tuple[str, FleetResult, DisaggregatedRun | None]] = [
        (r.policy, r, None) for r in results
    ]
    out = sys.stdout
    out.write(
        f"trace: {trace.name}, {trace.num_requests:,} requests; "
        f"wall {time.perf_counter() - started:.0f} s\n"
        f"aggregated on {aggregated_gpu}: tuned budget {budgets['tuned']}; "
        f"default {budgets['default']}; balancer {budgets['balancer']}\n"
        f"prompts the {prefill.name} ({args.prefill_tp} GPU a replica) can prefill within the "
        f"TTFT at its datasheet floor: {sum(floor_ok):,} of {trace.num_requests:,} "
        f"({trace.num_requests - sum(floor_ok):,} no deployment on it serves)\n"
    )
    reach: dict[str, tuple[int, int]] = {}
    for run in runs:
        p_pool, d_pool = run.pools
        decode_inputs = plan_inputs(
            with_tensor_parallel(spec, args.decode_tp), catalog.get(d_pool.sku)
        )
        told = verdict(
            aggregated,
            prefill_inputs,
            decode_inputs,
            workload,
            (prices[aggregated.profile.name], prices[p_pool.sku], prices[d_pool.sku]),
            link,
        )
        # The prefill replica's reach at the chunk it ran last: longer prompts miss the TTFT
        # however many replicas run.
        last = (
            run.operator.retunes[-1].to_batching
            if run.operator.retunes
            else (p_pool.engine.max_num_batched_tokens, p_pool.engine.max_num_seqs)
        )
        ran = plan_phases(at_batching(prefill_inputs, *last), decode_inputs, workload, link)
        longest = ran.longest_prompt_tokens or 0
        past = sum(r.num_prompt_tokens > longest for r in trace.requests)
        name = f"split, {d_pool.sku} decode"
        reach[name] = (longest, past)
        rows.append((name, run.pooled.result, run))
        out.write(
            f"{name}: prefill {p_pool.sku} x{p_pool.gpus_per_replica} "
            f"{p_pool.engine.max_num_batched_tokens}/{p_pool.engine.max_num_seqs}, decode "
            f"{d_pool.sku} {d_pool.engine.max_num_batched_tokens}/{d_pool.engine.max_num_seqs}; "
            f"opened on {p_pool.initial_replicas} + {d_pool.initial_replicas}; KV link "
            f"{link.gbps:g} Gb/s ({link.source})"
            + (
                ""
                if args.true_kv_link_gbps is None
                else f", the hand-off over {args.true_kv_link_gbps:g} Gb/s"
            )
            + f"; engines: {sim_args.engine_truth or 'as profiled'}"
            + ("" if sim_args.engine_slowdown == 1.0 else f" x{sim_args.engine_slowdown:g}")
            + "; re-planned at "
            + (", ".join(f"{s:.0f} s" for s, _ in run.operator.replans) or "never")
            + "; prefill re-tuned "
            + (
                ", ".join(
                    f"at {r.at_s:.0f} s {r.from_batching[0]} -> {r.to_batching[0]}"
                    for r in run.operator.retunes
                )
                or "never"
            )
            + f"\n  prefill reach at {last[0]:,} tokens a chunk: prompts up to {longest:,} tokens "
            f"({past:,} requests past it, which no number of its replicas serves in time)"
            + f"\n  plan for the trace's mix (mean prompt {workload.mean_prompt_tokens:,.0f}, P99 "
            f"{workload.prompt_p99_tokens:,}, mean output {workload.mean_output_tokens:,.0f}): "
            f"{told.words}\n"
        )
    out.write(
        f"\n{'contender':<28}{'SLO met':>9}{'servable met':>14}{'GPU-h':>8}{'cost $':>9}  pools\n"
    )
    for name, result, apart in rows:
        met = _met_among(result, floor_ok, world.fleet.ttft_slo_s, world.fleet.itl_slo_s)
        pools = (
            ""
            if apart is None
            else ", ".join(
                f"{role} {b.sku} {b.gpu_hours:.2f} GPU-h (most {b.peak_replicas})"
                for role, b in zip(("prefill", "decode"), apart.pooled.pools, strict=True)
            )
        )
        out.write(
            f"{name:<28}{result.attainment:>9.2%}{met:>14.2%}{result.gpu_hours:>8.2f}"
            f"{result.cost_usd:>9.2f}  {pools}\n"
        )
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "contender": name,
                        "attainment": round(r.attainment, 6),
                        "servable_attainment": round(
                            _met_among(r, floor_ok, world.fleet.ttft_slo_s, world.fleet.itl_slo_s),
                            6,
                        ),
                        "gpu_hours": round(r.gpu_hours, 6),
                        "cost_usd": round(r.cost_usd, 4),
                        **(
                            {}
                            if apart is None
                            else {
                                "operator": apart.operator.report(),
                                "prefill_reach_tokens": reach[name][0],
                                "requests_past_reach": reach[name][1],
                            }
                        ),
                    }
                    for name, r, apart in rows
                ]
            )
        )
    return 0


def _servable(trace, spec, profile, tp: int, ttft_slo_s: float) -> list[bool]:  # type: ignore[no-untyped-def]
    """Per request: whether its prompt, in one step at the datasheet peaks of a prefill
    replica's GPUs, prefills within the TTFT SLO."""
    model = step_time_model(profile, spec.model.shape.resolve(), tp)
    return [
        step_floor_s(
            model.work,
            model.peak_tflops,
            model.bandwidth_gbps,
            0,
            0,
            (PrefillChunk(r.num_prompt_tokens, 0),),
        )
        <= ttft_slo_s
        for r in trace.requests
    ]


def _met_among(
    result: FleetResult, among: list[bool], ttft_slo_s: float, itl_slo_s: float
) -> float:
    total = sum(among)
    met = sum(
        1
        for ok, ttft, itl in zip(among, result.ttft_s, result.itl_p99_s, strict=True)
        if ok and not math.isnan(ttft) and ttft <= ttft_slo_s and itl <= itl_slo_s
    )
    return met / total if total else 1.0


def _workload(trace) -> PhaseWorkload:  # type: ignore[no-untyped-def]
    prompts = sorted(r.num_prompt_tokens for r in trace.requests)
    mean_prompt = sum(prompts) / len(prompts)
    mean_output = sum(r.num_output_tokens for r in trace.requests) / len(prompts)
    return PhaseWorkload(
        mean_prompt, max(math.ceil(mean_prompt), int(nearest_rank(prompts, 0.99))), mean_output
    )


def _progress(started: float, name: str, result: FleetResult) -> None:
    sys.stderr.write(
        f"{time.perf_counter() - started:7.1f} s  {name:<28} {result.attainment:.2%} "
        f"{result.gpu_hours:.2f} GPU-h\n"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
