"""Fleet simulation benchmark: every policy over trace files, with wall time and peak memory.

Each run is `tokenpilot simulate --trace FILE --rate R --json` in a fresh Python process, so
its wall time and peak resident memory are its own. Prints a Markdown section per run (the
table docs/fleet-simulation.md quotes) and a summary of the acceptance figures.

    .venv/bin/python bench/fleet_traces.py TRACE [TRACE ...] [--rates 1,4,8] [-- SIMULATE ARGS]

The page's tables run the tuner's interactive profile at Llama 3.1's own context (131,072
tokens), so every run starts with `SETTINGS`; arguments after `--` come later and win.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

# Runs `tokenpilot simulate` and reports its own peak RSS on stderr (KiB on Linux).
CHILD = """
import resource, sys
from tokenpilot.cli import main
code = main(sys.argv[1:])
sys.stderr.write(f"MAXRSS_KIB {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n")
raise SystemExit(code)
"""

# What the tables in docs/fleet-simulation.md were made with, where simulate's defaults (the
# LLMService's: balanced, 8,192 tokens) differ.
SETTINGS = ["--profile", "interactive", "--max-model-len", "131072"]
WALL_LIMIT_S = 60.0
MEMORY_LIMIT_KIB = 1024 * 1024


def run_one(trace: Path, rate: str, extra: list[str]) -> tuple[dict, float, int]:
    argv = ["simulate", "--trace", str(trace), "--rate", f"x{rate}", "--json", *SETTINGS, *extra]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, timeout=600
    )
    wall_s = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{trace} x{rate}: simulate failed:\n{done.stderr}")
    maxrss = next(
        int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("MAXRSS_KIB")
    )
    return json.loads(done.stdout), wall_s, maxrss


def markdown(trace: Path, data: dict, rate: str, wall_s: float, maxrss_kib: int) -> str:
    # The file's name: simulate's own trace name already carries the rate (`... x4`).
    lines = [
        f"### {trace.name} at x{rate} ({data['requests']} requests)",
        "",
        f"Wall time {wall_s:.1f} s for all policies, peak memory {maxrss_kib / 1024:.0f} MiB.",
        "",
        "| policy | SLO met | goodput rps | TTFT p50 / p99 ms | ITL p50 / p99 ms "
        "| GPU-h | cost $ | scale events | prefix hits |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, f in data["policies"].items():

        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value * 1e3:.0f}"

        def hits(value: float | None) -> str:
            return "-" if value is None else f"{value:.1%}"

        lines.append(
            f"| {name} | {f['attainment']:.2%} | {f['goodput_rps']:.2f} "
            f"| {ms(f['ttft_p50_s'])} / {ms(f['ttft_p99_s'])} "
            f"| {ms(f['itl_p50_s'])} / {ms(f['itl_p99_s'])} "
            f"| {f['gpu_hours']:.2f} | {f['cost_usd']:.2f} | {f['scale_events']} "
            f"| {hits(f.get('prefix_cache_hit_rate'))} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--rates", default="1", help="comma list of rate factors")
    # Everything after `--` goes to `tokenpilot simulate` untouched, so an option's value
    # (`-- --gpu L4`) is never mistaken for a trace file.
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    failed = False
    for trace in args.traces:
        for rate in args.rates.split(","):
            data, wall_s, maxrss = run_one(trace, rate.strip(), extra)
            print(markdown(trace, data, rate.strip(), wall_s, maxrss))
            if rate.strip() == "1":
                ok = wall_s < WALL_LIMIT_S and maxrss < MEMORY_LIMIT_KIB
                failed |= not ok
                print(
                    f"acceptance ({trace.name}, x1): {wall_s:.1f} s < {WALL_LIMIT_S:.0f} s and "
                    f"{maxrss / 1024:.0f} MiB < 1024 MiB: {'yes' if ok else 'NO'}\n"
                )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
