"""Benchmark: warm start of the dev cluster, from `up` to every fake node Ready, and `down`.

Runs `up` and `down` a few times against the cached binaries and reports each component's time
to ready as `up` logs it, the total, and the teardown time. Target: all nodes Ready in under
30 s on a developer machine.

    python bench/dev_cluster_startup.py              # 3 rounds
    python bench/dev_cluster_startup.py --rounds 5 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from tokenpilot_lab.devcluster import cluster


def one_round(state_dir: Path) -> dict[str, float]:
    lines: list[str] = []
    started = time.monotonic()
    cluster.up(cluster.UpOptions(name="bench", state_dir=state_dir), progress=lines.append)
    up_s = time.monotonic() - started
    started = time.monotonic()
    cluster.down(state_dir)
    down_s = time.monotonic() - started
    result = {"up_s": up_s, "down_s": down_s}
    for line in lines:  # "<name> ready (pid N, 2.5 s)" / "4 fake nodes Ready (1.2 s)"
        if line.endswith(" s)") and "(" in line:
            name = line.split(" ready", 1)[0].split(" Ready", 1)[0]
            result[name] = float(line.rsplit(", ", 1)[-1].rsplit("(", 1)[-1].removesuffix(" s)"))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        for index in range(args.rounds):
            rounds.append(one_round(Path(tmp) / f"round-{index}"))
    keys = list(rounds[0])
    summary = {k: statistics.median(r[k] for r in rounds) for k in keys}
    if args.json:
        print(json.dumps({"rounds": rounds, "median": summary}, indent=2))
    else:
        for key in keys:
            print(
                f"{key:<26} median {summary[key]:6.2f} s   max {max(r[key] for r in rounds):6.2f} s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
