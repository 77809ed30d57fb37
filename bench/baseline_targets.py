"""Every autoscaling baseline at a sweep of targets: is there one that beats TokenPilot?

The fleet comparison sizes each baseline's target (running requests per replica for `hpa` and
`aibrix-kpa`, requests in flight for `keda`) with one measured-capacity procedure
(docs/fleet-simulation.md). A user may set another, so a verdict of "no baseline reaches
TokenPilot's attainment on fewer GPU-hours" holds only if it holds at every target they could
pick. This runs `tokenpilot simulate` once with every policy (the measured targets), then once
per target in `--targets` with the six autoscaling baselines (both budgets) and that target
(`--target-running`, which sets KEDA's threshold too), and prints each baseline's attainment
and GPU-hours at every target, marking any point at TokenPilot's attainment or higher on fewer
GPU-hours.

    .venv/bin/python bench/baseline_targets.py [--targets 0.5,2,4] [--jobs 2] \
        [--reference SAVED.json] -- SIMULATE ARGS

SIMULATE ARGS are the run's own (`--trace ... --load x8 --gpu ... --cold-start 90` or
`--synthetic diurnal ...`), passed to every run untouched. `--reference` takes a saved
`simulate --policy all --json` of the same run instead of running it again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tokenpilot_lab.fleet.compare import BASELINES, TUNED_SUFFIX

# The fleet comparison's autoscaling baselines on both budgets (`static-peak` takes no target).
AUTOSCALERS = tuple(b for b in BASELINES if b != "static-peak")
BASELINES_SWEPT = (*AUTOSCALERS, *(f"{b}{TUNED_SUFFIX}" for b in AUTOSCALERS))
CHILD = "import sys; from tokenpilot.cli import main; raise SystemExit(main(sys.argv[1:]))"


def simulate(argv: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "simulate", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"simulate {' '.join(argv)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def beats(row: dict, tokenpilot: dict) -> bool:
    """At TokenPilot's attainment or higher, on fewer GPU-hours."""
    return (
        row["attainment"] >= tokenpilot["attainment"] and row["gpu_hours"] < tokenpilot["gpu_hours"]
    )


def table(reference: dict, swept: dict[float, dict]) -> str:
    tp = reference["tokenpilot"]
    targets = sorted(swept)
    lines = [
        f"tokenpilot: {tp['attainment']:.2%} on {tp['gpu_hours']:.2f} GPU-h",
        "",
        "| baseline | measured target | " + " | ".join(f"target {t:g}" for t in targets) + " |",
        "|---|---:|" + "---:|" * len(targets),
    ]
    winners = []
    for name in BASELINES_SWEPT:
        cells = []
        for label, row in [("measured", reference.get(name))] + [
            (f"{t:g}", swept[t].get(name)) for t in targets
        ]:
            if row is None:
                cells.append("-")
                continue
            cell = f"{row['attainment']:.2%}, {row['gpu_hours']:.2f}"
            if beats(row, tp):
                winners.append(f"{name} at {label}")
                cell = f"**{cell}**"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    verdict = ", ".join(winners) or "none"
    lines += ["", f"Baselines at >= tokenpilot's attainment on fewer GPU-hours: {verdict}."]
    return "\n".join(lines).replace("%", " %") + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="0.5,2,4", help="comma list, per replica")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--reference", type=Path, help="a saved --policy all --json of the run")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    targets = [float(t) for t in args.targets.split(",") if t.strip()]
    if any(not t > 0 for t in targets):
        parser.error(f"--targets {args.targets}: every target must be > 0")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        if args.reference is not None:
            reference = json.loads(args.reference.read_text())["policies"]
        else:
            reference_run = pool.submit(simulate, [*extra, "--policy", "all"])
        runs = {
            t: pool.submit(
                simulate,
                [*extra, "--policy", ",".join(BASELINES_SWEPT), "--target-running", f"{t:g}"],
            )
            for t in targets
        }
        if args.reference is None:
            reference = reference_run.result()["policies"]
        swept = {t: run.result()["policies"] for t, run in runs.items()}
    print(f"simulate {' '.join(extra)}\n")
    print(table(reference, swept))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
