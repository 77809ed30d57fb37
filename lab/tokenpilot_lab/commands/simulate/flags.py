"""`tokenpilot simulate`'s flags: their definitions and ranges, and the trace they name."""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from tokenpilot.api.model_shape import MODEL_PRESETS
from tokenpilot.api.units import ITL_P99, TTFT_P99
from tokenpilot.api.workload import DEFAULT_RETUNE, RetuneMode
from tokenpilot.commands.tuner_flags import add_tuner_flags
from tokenpilot.core.tuner import check_engine_slowdown
from tokenpilot_lab.fleet import DEFAULT_BALANCER, DEFAULT_COLD_START_S, Balancer
from tokenpilot_lab.fleet.config import DEFAULT_SCRAPE_INTERVAL_S
from tokenpilot_lab.fleet.operator import RestartMemory
from tokenpilot_lab.sim import (
    BUILTIN_TRUTHS,
    PROFILE_TRUTH,
    EngineTruth,
    InvalidTruth,
    builtin_truth,
    parse_truth,
)
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

SLO = "ttft=2s,itl=50ms"


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
        "--median-prompt",
        type=int,
        default=1024,
        help="synthetic median prompt, tokens (log-normal, sigma 0.8)",
    )
    parser.add_argument(
        "--median-output",
        type=int,
        default=128,
        help="synthetic median output, tokens (log-normal, sigma 0.8)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the synthetic trace, of --load's shifts and of the service balancer",
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
        help="batching.maxNumBatchedTokens of tokenpilot's spec, instead of the tuner's "
        "recommendation (and of the +tuned baselines' engines)",
    )
    parser.add_argument(
        "--workload-hints",
        action="store_true",
        help="give tokenpilot's spec.workload the trace's own P99 prompt and mean context, as a "
        "user who knows the traffic would; without it the spec has no hints and the operator "
        "learns the workload from the engines' metrics",
    )
    parser.add_argument(
        "--retune",
        choices=[m.value for m in RetuneMode],
        default=DEFAULT_RETUNE.value,
        help=f"batching.retune of tokenpilot's spec (default: the API's, {DEFAULT_RETUNE.value})",
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
        "that misprices its engines (default 1, a profile that prices them right); with "
        "--engine-truth, F times the truth's price",
    )
    parser.add_argument(
        "--engine-truth",
        default=PROFILE_TRUTH,
        metavar="NAME|FILE",
        help="the simulated engines price their steps by a hidden truth that differs from the "
        "GPU profile per term and in shape, while the operator keeps the profile: "
        f"{', '.join(BUILTIN_TRUTHS)}, or a YAML file naming the changes (default "
        f"{PROFILE_TRUTH}: engines at the profile's price)",
    )
    parser.add_argument(
        "--balancer",
        choices=[b.value for b in Balancer],
        default=DEFAULT_BALANCER.value,
        help="how arrivals reach the Ready replicas, for every policy and every sizing run: "
        "service, kube-proxy's random choice per connection as the rendered Service gets "
        "(seeded from --seed, the default), or least-request, what a least-request proxy or "
        "an endpoint picker gives",
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


def engine_truth(args: argparse.Namespace) -> EngineTruth | None:
    """The truth `--engine-truth` names: a built-in by name, else a YAML file; None for
    engines at the profile's price."""
    text = args.engine_truth
    if text == PROFILE_TRUTH or text in BUILTIN_TRUTHS:
        return builtin_truth(text)
    path = Path(text)
    if not path.is_file():
        raise InvalidTruth(
            f"--engine-truth {text}: neither a built-in truth nor a file; give one of "
            f"{PROFILE_TRUTH}, {', '.join(BUILTIN_TRUTHS)}, or the path of a YAML file naming "
            "the changes"
        )
    try:
        content = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        # Unreadable: the user must fix the path or the file.
        raise InvalidTruth(f"--engine-truth {text}: cannot read it ({exc})") from None
    return parse_truth(content, str(path))


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
        above_zero += [
            ("--mean-rps", args.mean_rps),
            ("--duration", args.duration),
            ("--median-prompt", args.median_prompt),
            ("--median-output", args.median_output),
        ]
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
        lengths = {
            "median_prompt_tokens": args.median_prompt,
            "median_output_tokens": args.median_output,
        }
        if args.synthetic == "poisson":
            trace = poisson(args.mean_rps, args.duration, seed=args.seed, **lengths)
        elif args.synthetic == "bursts":
            trace = _bursts(args.mean_rps, args.duration, seed=args.seed, **lengths)
        else:
            trace = _diurnal(args.mean_rps, args.duration, seed=args.seed, **lengths)
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


def _bursts(mean_rps: float, duration_s: float, *, seed: int, **lengths: int) -> Trace:
    # Quiet at half the mean, bursts at 5.5x the mean for a tenth of each 5 min: mean as asked.
    return bursts(mean_rps * 0.5, mean_rps * 5.5, duration_s, seed=seed, **lengths)


def _diurnal(mean_rps: float, duration_s: float, *, seed: int, **lengths: int) -> Trace:
    # One whole cycle over the run so a short run still sees a trough and a peak.
    return diurnal(mean_rps, duration_s, seed=seed, period_s=max(duration_s, 1.0), **lengths)


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
