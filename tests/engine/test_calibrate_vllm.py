"""`tokenpilot calibrate` against real vLLM (CPU build, tiny model): a loaded machine is refused.

The endpoint stamps no engine time, so calibrate reads the engine's own counters (steps run,
prefill times). CPU burners started beside the engine take its cores from it while the grid
runs, so its steps vary far more than any model of one engine allows: calibrate must refuse and
write nothing, on the held-out residual or, when the stalls leave a grid point's windows without
a step to time three times over, as unmeasurable.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tokenpilot_lab.vllm_server import TINY_MODEL_SHAPE_YAML, VllmServer

pytestmark = pytest.mark.engine

NUM_BURNERS = 4


def budget_of(server: VllmServer) -> int:
    """The token budget the server was started with; calibrate is told it. The server has the
    tiny model's whole context (16,384 positions), so a decode stream outlasts a grid point: at
    4,096 a fast step between the burners' time slices ran one out before a slow burst."""
    args = list(server.config.extra_args)
    return int(args[args.index("--max-num-batched-tokens") + 1])


def test_a_calibration_on_a_loaded_machine_is_refused_and_writes_nothing(
    long_context_server: VllmServer, tmp_path: Path
) -> None:
    shape = tmp_path / "tiny-shape.yaml"
    shape.write_text(TINY_MODEL_SHAPE_YAML)
    out = tmp_path / "cpu.yaml"
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(NUM_BURNERS)
    ]
    try:
        run = subprocess.run(
            [
                sys.executable, "-m", "tokenpilot.cli", "calibrate",
                "--endpoint", long_context_server.base_url, "--model", "tiny",
                "--shape", str(shape), "--gpu-name", "CPU-TEST",
                "--max-num-batched-tokens", str(budget_of(long_context_server)),
                "--out", str(out),
            ],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    print(run.stderr)
    assert run.returncode == 3, run.stderr
    assert "refused, no profile written" in run.stderr
    assert "residual:" in run.stderr or "unmeasurable:" in run.stderr, run.stderr
    assert not out.exists()
