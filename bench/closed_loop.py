r"""The closed loop's fleet tables: the `tokenpilot` row of two checkouts side by side, on the
development trace and the generators, under the profile-true engines and each hidden truth.

For every source and every engine setting it runs `tokenpilot simulate --policy all --json`
on this checkout (the new row and every baseline) and `--policy tokenpilot` on the old one
(`--old DIR`, a checkout whose `operator/` and `lab/` are put first on PYTHONPATH), one after
another in fresh processes, and prints one Markdown table per source with the goal checks:

- `tokenpilot` meets 99 % of requests within both SLOs;
- on no more than 0.85x `static-peak`'s GPU-hours (1.05x where the load is flat);
- on no more GPU-hours than the smallest single fleet on the trace-planned budget that meets
  99 % over the whole run, known in hindsight (`--hindsight`: `bench/hindsight_fleet.py
  --single-fleet` on the same engines and balancer; left out without the flag);
- no baseline, on either budget, at equal or higher attainment on fewer GPU-hours.

    git worktree add ../tokenpilot-old 76607e9
    .venv/bin/python bench/closed_loop.py --old ../tokenpilot-old --hindsight \
        --sources azure-llm-2023-code.csv:x4,synthetic:bursts --engines profile,chunk-compute \
        -- --gpu H100-80GB --model llama-3.1-8b --slo ttft=2s,itl=50ms --balancer service
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tokenpilot_lab.commands.simulate.report import FLAT_SWING

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
HINDSIGHT = Path(__file__).resolve().parent / "hindsight_fleet.py"
SYNTHETIC = "synthetic:"
# A generated trace's shape, the same for every engine setting.
GENERATOR_ARGS = ["--mean-rps", "10", "--duration", "1800", "--seed", "0"]
BASELINES = ("hpa", "keda", "static-peak", "static-peak+tuned", "hpa+tuned", "keda+tuned")
ATTAINMENT_GOAL = 0.99
VARYING_RATIO_LIMIT, FLAT_RATIO_LIMIT = 0.85, 1.05


def source_args(source: str) -> list[str]:
    if source.startswith(SYNTHETIC):
        return ["--synthetic", source.removeprefix(SYNTHETIC), *GENERATOR_ARGS]
    name, _, load = source.partition(":")
    path = Path(name) if Path(name).exists() else TRACES / name
    return ["--trace", str(path), *(["--load", load] if load else [])]


def hindsight_gpu_hours(argv: list[str]) -> float:
    """The smallest single fleet's GPU-hours (bench/hindsight_fleet.py --single-fleet)."""
    done = subprocess.run(
        [sys.executable, str(HINDSIGHT), "--single-fleet", "--json", "--", *argv],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"hindsight_fleet {' '.join(argv)} failed:\n{done.stderr}")
    return float(json.loads(done.stdout)["constant_in_hindsight"]["gpu_hours"])


def simulate(argv: list[str], checkout: Path | None) -> tuple[dict, float]:
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = f"{checkout / 'operator'}:{checkout / 'lab'}"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tokenpilot.cli", "simulate", *argv, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"simulate {' '.join(argv)} failed:\n{done.stderr}")
    return json.loads(done.stdout), time.perf_counter() - started


def row(name: str, f: dict) -> str:
    return f"| {name} | {f['attainment']:.2%} | {f['gpu_hours']:.2f} | {f['scale_events']} |"


def goal(new: dict, hindsight_gpu_h: float | None) -> tuple[str, bool]:
    p = new["policies"]
    tp, static = p["tokenpilot"], p["static-peak"]
    ratio = tp["gpu_hours"] / static["gpu_hours"]
    swing = new.get("prompt_tokens_per_5min_swing")
    flat = swing is not None and swing < FLAT_SWING
    limit = FLAT_RATIO_LIMIT if flat else VARYING_RATIO_LIMIT
    dominating = [
        n
        for n in BASELINES
        if n in p and p[n]["attainment"] >= tp["attainment"] and p[n]["gpu_hours"] < tp["gpu_hours"]
    ]
    checks = [
        (f"attainment {tp['attainment']:.2%} >= 99 %", tp["attainment"] >= ATTAINMENT_GOAL),
        (f"GPU-h {ratio:.3f}x static-peak <= {limit:g}", ratio <= limit),
        (f"no baseline dominates ({', '.join(dominating) or 'none'})", not dominating),
    ]
    if hindsight_gpu_h is not None:
        checks.append(
            (
                f"GPU-h {tp['gpu_hours']:.2f} <= hindsight's single fleet {hindsight_gpu_h:.2f}",
                tp["gpu_hours"] <= hindsight_gpu_h,
            )
        )
    words = "; ".join(f"{text}: {'yes' if ok else 'NO'}" for text, ok in checks)
    return words, all(ok for _, ok in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the old checkout")
    parser.add_argument("--sources", required=True, help="comma list: TRACE[:xN] or synthetic:G")
    parser.add_argument("--engines", default="profile", help="comma list: profile or a truth")
    parser.add_argument(
        "--hindsight", action="store_true", help="also check against the hindsight single fleet"
    )
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    misses = 0
    for source in args.sources.split(","):
        lines = [
            f"### {source}",
            "",
            "| engines | policy | SLO met | GPU-h | scale events |",
            "|---|---|---:|---:|---:|",
        ]
        verdicts = []
        for engines in args.engines.split(","):
            truth = [] if engines == "profile" else ["--engine-truth", engines]
            base = [*source_args(source), *extra, *truth]
            new, new_s = simulate([*base, "--policy", "all"], None)
            old, old_s = simulate([*base, "--policy", "tokenpilot"], args.old)
            lines.append(row(f"{engines} | tokenpilot (old)", old["policies"]["tokenpilot"]))
            lines.append(row(f"{engines} | **tokenpilot (new)**", new["policies"]["tokenpilot"]))
            for name in BASELINES:
                if name in new["policies"]:
                    lines.append(row(f"{engines} | {name}", new["policies"][name]))
            words, ok = goal(new, hindsight_gpu_hours(base) if args.hindsight else None)
            misses += not ok
            operator = new["policies"]["tokenpilot"].get("operator") or {}
            retunes = ", ".join(
                f"{r['from']} -> {r['to']} at {r['at_s']:.0f} s"
                for r in operator.get("retunes", [])
            )
            verdicts.append(
                f"- {engines}: {words}. Re-tunes: {retunes or 'none'}. "
                f"Wall {new_s:.0f} s (all) and {old_s:.0f} s (old tokenpilot)."
            )
            print(f"# {source} {engines} done", file=sys.stderr, flush=True)
        print("\n".join([*lines, "", *verdicts, ""]), flush=True)
    print(f"{misses} run(s) miss a goal", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
