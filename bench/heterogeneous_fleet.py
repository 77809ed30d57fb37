r"""One service on several GPU types, against the same service on each GPU alone.

On one trace, for each balancer asked for (`least-request`: an InferencePool's endpoint picker;
`service`: the rendered Service's random pick), it runs:

- `tokenpilot` on pools: the operator's autoscaler and pool split over the pools named
  (default H100-80GB, A100-80GB, L40S; each pool's maxReplicas `--pool-max`), each pool's
  engines its GPU's engine model at the budget the operator plans for that pool
  (fleet.pool_operator, fleet.pool_compare);
- the baselines on the same pools and budgets: `hpa-per-pool` (one HPA per pool Deployment,
  its own measured target) and `static-split` (a fixed split sized per pool);
- `tokenpilot` on each GPU alone, through `tokenpilot simulate`'s own path (the single-SKU
  simulator, `--max-replicas` as given), at the same list price;

every pool and fleet priced from fleet/gpu_prices.yaml (list prices, with their sources).
The table gives attainment, GPU-hours, cost, each pool's GPU-hours, and the cost over that of
the cheapest single-GPU `tokenpilot` fleet meeting 99 % on the same run; the goal line reads
the acceptance: pooled `tokenpilot` at >= 99 % for <= 0.8x that cost, and no baseline on pools
reaching its attainment for less.

`--nodes-run-out SKU@S` makes a pool's nodes full from S seconds on (its new pods stay
Pending, and the operator's spill-over moves its share): the pools only, as the single-GPU
simulator has no such event.

Every spec keeps the budgets planned at creation (`batching.retune` Off, `--retune` to change
the single-GPU runs'): the simulator rolls no pool Deployment, so the single-GPU fleets run
the same way unless told otherwise.

    python bench/heterogeneous_fleet.py -- \
        --trace ../shared/traces/azure-llm-2023-code.csv --load x8 \
        --slo ttft=2s,itl=50ms --max-model-len 8192
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import dataclass

from rich.console import Console

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.workload import RetuneMode
from tokenpilot_lab.commands.simulate import flags as simulate_flags
from tokenpilot_lab.commands.simulate import world as simulate_world
from tokenpilot_lab.commands.simulate.pools import list_prices, pooled_service
from tokenpilot_lab.fleet import FleetResult
from tokenpilot_lab.fleet.pool_compare import (
    POOL_CONTENDERS,
    planned_pools,
    pool_contenders,
    run_pool_contenders,
    size_pools,
)

ATTAINMENT_GOAL = 0.99
COST_GOAL = 0.8


@dataclass(frozen=True)
class Row:
    balancer: str
    name: str
    result: FleetResult
    pools: tuple[tuple[str, float, int], ...]  # (sku, GPU-hours, most replicas)


def main(argv: list[str]) -> int:
    ours = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ours.add_argument("--pools", default="H100-80GB,A100-80GB,L40S")
    ours.add_argument(
        "--pool-max",
        default="64",
        metavar="N|SKU=N[,...]",
        help="each pool's maxReplicas (one for all, or per SKU; unnamed SKUs 64); each GPU's "
        "single-GPU fleet gets the same as its --max-replicas: the same supply",
    )
    ours.add_argument("--balancers", default="least-request,service")
    ours.add_argument(
        "--nodes-run-out",
        default="",
        metavar="SKU@S[,...]",
        help="a pool's nodes run out S seconds into the run (its new pods stay Pending)",
    )
    ours.add_argument("--json", action="store_true", help="also print the rows as JSON")
    split = argv.index("--") if "--" in argv else len(argv)
    args = ours.parse_args(argv[:split])
    flags = argparse.ArgumentParser()
    simulate_flags.configure(flags)
    sim_args = flags.parse_args(argv[split + 1 :])
    if "--retune" not in argv[split + 1 :]:
        sim_args.retune = RetuneMode.Off.value
    skus = [s.strip() for s in args.pools.split(",") if s.strip()]
    out_s = {
        sku: float(at)
        for sku, at in (item.split("@") for item in args.nodes_run_out.split(",") if item)
    }
    maxes = _pool_maxes(args.pool_max, skus)
    prices = list_prices()
    price = {sku: prices[sku][0] for sku in skus}
    catalog = load_builtin_catalog()
    quiet = Console(stderr=True, quiet=True)
    rows: list[Row] = []
    started = time.perf_counter()
    trace = simulate_flags.load_trace(sim_args)
    for balancer in (b.strip() for b in args.balancers.split(",")):
        run_args = copy.copy(sim_args)
        run_args.balancer = balancer
        for sku in skus:
            alone = copy.copy(run_args)
            alone.gpu, alone.policy, alone.usd_per_gpu_hour = sku, "tokenpilot", price[sku]
            alone.max_replicas = maxes[sku]
            results, _, _ = simulate_world.run_policies(alone, trace, quiet)
            rows.append(Row(balancer, f"tokenpilot {sku} alone", results[0], ()))
            _progress(started, rows[-1])
        run_args.gpu = skus[0]
        service = pooled_service(run_args, skus, price, max_replicas=maxes)
        fleet = simulate_world.setup(run_args, trace).fleet
        pools = planned_pools(
            service,
            catalog.get,
            catalog.by_product_label,
            price,
            enable_prefix_caching=sim_args.enable_prefix_caching,
            nodes_run_out_s=out_s,
        )
        sizing = size_pools(trace, fleet, pools)
        entries = pool_contenders(
            POOL_CONTENDERS, service, catalog.get, catalog.by_product_label, pools, sizing
        )
        for entry, pooled in zip(entries, run_pool_contenders(trace, fleet, entries), strict=True):
            bills = tuple((b.sku, b.gpu_hours, b.peak_replicas) for b in pooled.pools)
            rows.append(Row(balancer, f"{entry.name} on pools", pooled.result, bills))
            _progress(started, rows[-1])
        sys.stdout.write(
            f"[{balancer}] pools: "
            + ", ".join(
                f"{p.sku} budget {p.engine.max_num_batched_tokens}/{p.engine.max_num_seqs} "
                f"at ${p.usd_per_gpu_hour:g}/GPU-h, max {p.max_replicas}"
                + (
                    ""
                    if p.nodes_run_out_s is None
                    else f", nodes run out at {p.nodes_run_out_s:g} s"
                )
                for p in pools
            )
            + f"; opening split {sizing.opening_split}; static split {sizing.static_split} "
            f"(alone at the peak: {[s.replicas for s in sizing.peak]}); HPA targets "
            f"{[s.target_running_per_replica for s in sizing.peak]} running per replica\n"
        )
    wall_s = time.perf_counter() - started
    sys.stdout.write(_table(rows, trace.name, trace.num_requests, wall_s, skus, prices))
    if args.json:
        print(json.dumps([_json(r) for r in rows]))
    return 0


def _pool_maxes(text: str, skus: list[str]) -> dict[str, int]:
    """`--pool-max`: one count for every pool, or SKU=N pairs (unnamed SKUs 64)."""
    if "=" not in text:
        return {sku: int(text) for sku in skus}
    given = {k.strip(): int(v) for k, v in (item.split("=") for item in text.split(",") if item)}
    return {sku: given.get(sku, 64) for sku in skus}


def _progress(started: float, row: Row) -> None:
    sys.stderr.write(
        f"{time.perf_counter() - started:7.1f} s  {row.balancer:<13} {row.name:<28} "
        f"{row.result.attainment:.2%} ${row.result.cost_usd:.2f}\n"
    )


def _table(
    rows: list[Row],
    trace: str,
    num_requests: int,
    wall_s: float,
    skus: list[str],
    prices: dict[str, tuple[float, str]],
) -> str:
    lines = [f"trace: {trace}, {num_requests:,} requests; wall time {wall_s:.0f} s"]
    lines += [f"  price {sku}: ${prices[sku][0]:g}/GPU-h ({prices[sku][1]})" for sku in skus]
    header = (
        f"{'routing':<14}{'contender':<30}{'SLO met':>9}{'GPU-h':>8}{'cost $':>9}"
        f"{'vs single':>10}  per pool GPU-h (most replicas)"
    )
    for balancer in dict.fromkeys(r.balancer for r in rows):
        mine = [r for r in rows if r.balancer == balancer]
        singles = [
            r for r in mine if r.name.endswith("alone") and r.result.attainment >= ATTAINMENT_GOAL
        ]
        cheapest = min(singles, key=lambda r: r.result.cost_usd) if singles else None
        lines += ["", header]
        for r in mine:
            ratio = (
                "" if cheapest is None else f"{r.result.cost_usd / cheapest.result.cost_usd:.2f}x"
            )
            per_pool = ", ".join(f"{s} {h:.2f} ({n})" for s, h, n in r.pools)
            lines.append(
                f"{balancer:<14}{r.name:<30}{r.result.attainment:>9.2%}{r.result.gpu_hours:>8.2f}"
                f"{r.result.cost_usd:>9.2f}{ratio:>10}  {per_pool}"
            )
        lines.append(_goal(mine, cheapest))
    return "\n".join(lines) + "\n"


def _goal(rows: list[Row], cheapest: Row | None) -> str:
    ours = next(r for r in rows if r.name == "tokenpilot on pools")
    met = ours.result.attainment >= ATTAINMENT_GOAL
    if cheapest is None:
        return (
            f"Goal: attainment {ours.result.attainment:.2%} (>= 99 %: {_yes(met)}); no "
            "single-GPU tokenpilot fleet met 99 %, so no cost ratio"
        )
    ratio = ours.result.cost_usd / cheapest.result.cost_usd
    cheaper = [
        r.name
        for r in rows
        if r.name.endswith("on pools")
        and r is not ours
        and r.result.attainment >= ours.result.attainment
        and r.result.cost_usd < ours.result.cost_usd
    ]
    return (
        f"Goal: attainment {ours.result.attainment:.2%} (>= 99 %: {_yes(met)}); cost {ratio:.2f}x "
        f"the cheapest single-GPU tokenpilot fleet meeting 99 % ({cheapest.name}, "
        f"${cheapest.result.cost_usd:.2f}) (<= {COST_GOAL}: {_yes(ratio <= COST_GOAL)}); "
        f"baselines on pools with >= attainment for less: {', '.join(cheaper) or 'none'}"
    )


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"


def _json(row: Row) -> dict[str, object]:
    return {
        "routing": row.balancer,
        "contender": row.name,
        "attainment": round(row.result.attainment, 6),
        "gpu_hours": round(row.result.gpu_hours, 6),
        "cost_usd": round(row.result.cost_usd, 4),
        "pools": [
            {"sku": s, "gpu_hours": round(h, 6), "most_replicas": n} for s, h, n in row.pools
        ],
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
