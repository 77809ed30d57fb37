"""`tokenpilot load`: drive streamed completions at local OpenAI-compatible engines.

One phase from --rate and --duration, or several with repeated --phase
NAME:SECONDS:RATE[:PROMPT_TOKENS:MAX_TOKENS]. Prints a per-phase table of client-side TTFT and
ITL percentiles, or one JSON object with --json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict

from tokenpilot_lab.loadgen import ARRIVALS, LoadError, LoadPhase, LoadPlan, run_plan, summarize


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        action="append",
        required=True,
        help="engine base URL on a loopback address, e.g. http://127.0.0.1:8000 (repeatable: "
        "requests go to the one with the fewest outstanding)",
    )
    parser.add_argument("--rate", type=float, default=1.0, help="requests per second (Poisson)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of arrivals")
    parser.add_argument("--prompt-tokens", type=int, default=256, help="prompt length in tokens")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens to generate")
    parser.add_argument(
        "--phase",
        action="append",
        default=[],
        metavar="NAME:SECONDS:RATE[:PROMPT:MAX]",
        help="a phase of the plan (repeatable, in order); replaces --rate/--duration",
    )
    parser.add_argument("--model", help="model name to ask for (default: the engine's first)")
    parser.add_argument("--max-requests", type=int, default=10_000, help="most requests sent")
    parser.add_argument("--max-in-flight", type=int, default=512, help="most outstanding")
    parser.add_argument(
        "--timeout",
        dest="request_timeout_s",
        type=float,
        default=120.0,
        help="seconds per request",
    )
    parser.add_argument(
        "--drain-timeout",
        dest="drain_timeout_s",
        type=float,
        default=30.0,
        help="seconds to finish",
    )
    parser.add_argument("--seed", type=int, default=0, help="arrival times' random seed")
    parser.add_argument(
        "--arrivals",
        choices=ARRIVALS,
        default="poisson",
        help="poisson (exponential gaps from --seed) or even (one every 1/rate)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")


def _phase(text: str, args: argparse.Namespace) -> LoadPhase:
    parts = text.split(":")
    if len(parts) not in (3, 5):
        raise LoadError(
            f"--phase {text!r}: expected NAME:SECONDS:RATE or NAME:SECONDS:RATE:PROMPT:MAX, "
            "e.g. burst:30:8 or burst:30:8:1024:128"
        )
    try:
        duration_s, rate = float(parts[1]), float(parts[2])
        prompt, max_tokens = (
            (int(parts[3]), int(parts[4]))
            if len(parts) == 5
            else (args.prompt_tokens, args.max_tokens)
        )
    except ValueError:
        raise LoadError(
            f"--phase {text!r}: SECONDS and RATE are numbers, PROMPT and MAX integers"
        ) from None
    return LoadPhase(parts[0], duration_s, rate, prompt, max_tokens)


_PLAN_FLAGS = (
    "model",
    "max_requests",
    "max_in_flight",
    "request_timeout_s",
    "drain_timeout_s",
    "seed",
    "arrivals",
)


def plan_from_args(args: argparse.Namespace) -> LoadPlan:
    if args.phase:
        phases = tuple(_phase(p, args) for p in args.phase)
    else:
        phases = (LoadPhase("load", args.duration, args.rate, args.prompt_tokens, args.max_tokens),)
    # The flags are named as the plan's fields.
    plan = LoadPlan(phases=phases, **{name: getattr(args, name) for name in _PLAN_FLAGS})
    plan.check()
    return plan


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def run(args: argparse.Namespace) -> int:
    try:
        plan = plan_from_args(args)
        result = asyncio.run(run_plan(plan, args.url))
    except LoadError as error:
        print(f"tokenpilot load: {error}", file=sys.stderr)
        return 2
    summaries = summarize(result)
    if args.json:
        out = {
            "phases": [asdict(s) for s in summaries],
            "refused": result.num_refused,
            "cut": result.num_cut,
            "elapsedS": round(result.elapsed_s, 3),
        }
        print(json.dumps(out))
    else:
        header = ("PHASE", "SENT", "OK", "ERR", "TTFT P50 ms", "TTFT P99 ms", "ITL P50 ms",
                  "ITL P99 ms", "TOK/S")  # fmt: skip
        rows = [header] + [
            (
                s.name,
                str(s.num_sent),
                str(s.num_ok),
                str(s.num_errors),
                _ms(s.ttft_p50_s),
                _ms(s.ttft_p99_s),
                _ms(s.itl_p50_s),
                _ms(s.itl_p99_s),
                f"{s.output_tokens_per_s:.0f}",
            )
            for s in summaries
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for row in rows:
            print(
                "  ".join(
                    c.rjust(w) if i else c.ljust(w)
                    for i, (c, w) in enumerate(zip(row, widths, strict=True))
                )
            )
        if result.num_refused or result.num_cut:
            print(f"not sent: {result.num_refused} over --max-in-flight, "
                  f"{result.num_cut} over --max-requests")  # fmt: skip
        errors = [r.error for r in result.records if r.error]
        if errors:
            print(f"first error: {errors[0]}")
    failed = sum(1 for r in result.records if not r.ok)
    return 1 if result.records and failed == len(result.records) else 0
