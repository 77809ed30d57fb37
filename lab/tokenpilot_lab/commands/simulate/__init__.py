"""`tokenpilot simulate`: replay a trace through the fleet simulator under each policy.

Reads a trace (or generates one from a seed), sizes the static fleet and the baselines'
targets for the trace's peak, runs every chosen policy on the same requests, one after
another, and prints one table (or `--json`); `--plot` draws load, replicas and latency.
The flags are `flags.py`, the run `world.py`, the table and the JSON `report.py`.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from tokenpilot.core.errors import TokenPilotError
from tokenpilot_lab.commands.simulate.flags import (
    check_flags,
    configure,
    engine_truth,
    load_trace,
    restart_times,
)
from tokenpilot_lab.commands.simulate.report import render_table, to_json
from tokenpilot_lab.commands.simulate.world import run_policies
from tokenpilot_lab.sim import InvalidEngineConfig
from tokenpilot_lab.workload import TraceError

__all__ = ["configure", "run"]


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        check_flags(args)
        restarts_s = restart_times(args.operator_restarts)
        truth = engine_truth(args)
        trace = load_trace(args)
        results, sizing, budgets = run_policies(args, trace, err, restarts_s)
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
            engine_truth=truth,
            balancer=args.balancer,
        )
        print(json.dumps(payload, sort_keys=False))
    else:
        sys.stdout.write(render_table(trace, results, sizing, budgets))
    if args.plot is not None:
        from tokenpilot_lab.fleet_plot import plot_comparison

        plot_comparison(trace, results, args.plot)
        err.print(f"plot written to {args.plot}", highlight=False)
    return 0
