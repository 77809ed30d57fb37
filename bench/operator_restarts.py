"""What an operator restart costs a service: the fleet simulator with one restart at each time.

A restart (an upgrade's rolling update, a standby's takeover after the leader died) starts
every service's autoscaler afresh from the memory the old process wrote: as it stopped
(`shutdown`), at its last periodic write (`periodic`, a process killed), or none. Each run is
`tokenpilot simulate ... --policy tokenpilot --json`, once without a restart and once with
`--operator-restarts T --operator-restart-memory M` for each T and M, two at a time; the table
is the one docs/autoscaling.md (*Restarts*) quotes.

    .venv/bin/python bench/operator_restarts.py TRACE --at 300,450,600,900 -- SIMULATE ARGS
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def run_one(trace: Path, extra: list[str], at_s: str | None, memory: str) -> dict:
    cmd = [sys.executable, "-m", "tokenpilot.cli", "simulate", "--trace", str(trace)]
    cmd += [*extra, "--policy", "tokenpilot", "--json"]
    if at_s is not None:
        cmd += ["--operator-restarts", at_s, "--operator-restart-memory", memory]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    result: dict = json.loads(done.stdout)["policies"]["tokenpilot"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--at", default="300,450,600,900,1200,1800,2400", help="seconds")
    parser.add_argument(
        "--memory", default="none,periodic,shutdown", help="simulate's --operator-restart-memory"
    )
    given = sys.argv[1:] if argv is None else argv
    # Everything after `--` is simulate's.
    cut = given.index("--") if "--" in given else len(given)
    args = parser.parse_args(given[:cut])
    extra = given[cut + 1 :]
    memories = args.memory.split(",")
    runs: list[tuple[str | None, str]] = [(None, "")]
    runs += [(at, memory) for at in args.at.split(",") for memory in memories]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda run: run_one(args.trace, extra, *run), runs))
    base = results[0]
    print(f"`{args.trace.name}` {' '.join(extra)}\n")
    print("| restart at | memory | SLO met | GPU-h | scale events | change in attainment |")
    print("|---|---|---:|---:|---:|---:|")
    for (at, memory), result in zip(runs, results, strict=True):
        change = 100 * (result["attainment"] - base["attainment"])
        print(
            f"| {'none' if at is None else at + ' s'} | {memory or '-'} "
            f"| {100 * result['attainment']:.2f} % | {result['gpu_hours']:.2f} "
            f"| {result['scale_events']} | {change:+.2f} points |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
