"""`tokenpilot probe`: measure prefill-decode interference against an OpenAI-compatible engine.

One condition (`--decodes 32 --num-prefill 4 --prefill-len 2048`) or a heatmap over
`--num-prefills` x `--prefill-lens` (`--heatmap`). With `--gpu`, the heatmap the GPU profile
measured is printed beside the probed one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict

from tokenpilot.adapters.interference import run_heatmap, run_probe
from tokenpilot.core.interference import ProbeError, ProbeSettings, format_heatmap


def _ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="engine base URL")
    parser.add_argument("--model", help="model name (default: the first of /v1/models)")
    parser.add_argument("--decodes", type=int, default=32, help="streaming decodes to prime")
    parser.add_argument("--num-prefill", type=int, default=4, help="prefills in the burst")
    parser.add_argument("--prefill-len", type=int, default=2048, help="prompt tokens per prefill")
    parser.add_argument("--heatmap", action="store_true", help="probe every cell of a grid")
    parser.add_argument("--num-prefills", type=_ints, default=[1, 2, 4, 8, 16])
    parser.add_argument("--prefill-lens", type=_ints, default=[128, 512, 1024, 2048, 4096])
    parser.add_argument("--settle-s", type=float, default=1.0, help="wait after priming")
    parser.add_argument("--baseline-s", type=float, default=1.0, help="watch before a burst")
    parser.add_argument("--recovery-s", type=float, default=1.0, help="watch after a burst")
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="the server's --time-scale (engine-sim)"
    )
    parser.add_argument("--decode-max-tokens", type=int, default=4096)
    parser.add_argument(
        "--decode-prompt-len", type=int, default=1024, help="context of each decode stream"
    )
    parser.add_argument(
        "--bursts", type=int, default=3, help="bursts per condition; the median is reported"
    )
    parser.add_argument("--gpu", help="print this GPU profile's measured heatmap beside")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args: argparse.Namespace) -> int:
    if args.decodes < 1 or args.num_prefill < 1 or args.prefill_len < 1:
        print(
            "probe: --decodes, --num-prefill and --prefill-len must be at least 1", file=sys.stderr
        )
        return 2
    if args.time_scale <= 0:
        print("probe: --time-scale must be positive", file=sys.stderr)
        return 2
    settings = ProbeSettings(
        url=args.url.rstrip("/"),
        num_decode=args.decodes,
        num_prefill=args.num_prefill,
        prefill_len=args.prefill_len,
        settle_s=args.settle_s,
        baseline_s=args.baseline_s,
        recovery_s=args.recovery_s,
        time_scale=args.time_scale,
        model=args.model,
        decode_max_tokens=args.decode_max_tokens,
        num_bursts=max(1, args.bursts),
        decode_prompt_len=max(1, args.decode_prompt_len),
    )
    try:
        if args.heatmap:
            results = asyncio.run(run_heatmap(settings, args.num_prefills, args.prefill_lens))
        else:
            results = [asyncio.run(run_probe(settings))]
    except ProbeError as error:
        print(f"probe: {error}", file=sys.stderr)
        return 1
    if args.json:
        rows = [{**asdict(r), "interference_pct": r.interference_pct} for r in results]
        print(json.dumps(rows, indent=2))
        return 0
    if not args.heatmap:
        print(results[0].describe())
        return 0
    measured = _measured_heatmap(args.gpu) if args.gpu else None
    for result in results:
        print(result.describe())
    title = f"interference at {args.decodes} decodes (probed"
    print(f"\n{title}{', measured in parentheses' if measured else ''})")
    print(format_heatmap(results, measured))
    return 0


def _measured_heatmap(gpu: str) -> dict[tuple[int, int], str]:
    from tokenpilot.adapters.profiles import load_builtin_catalog

    profile = load_builtin_catalog().get(gpu)
    if profile.measured is None or profile.measured.heatmap is None:
        return {}
    return {
        (c.num_prefill, c.prefill_len): f"{'<' if c.upper_bound else ''}{c.interference_pct:.0f}%"
        for c in profile.measured.heatmap.cells
    }
