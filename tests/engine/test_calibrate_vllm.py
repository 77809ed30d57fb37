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
from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenpilot_lab.vllm_server import (
    TINY_MODEL_SHAPE_YAML,
    VllmServer,
    VllmServerConfig,
    running_vllm,
)

pytestmark = pytest.mark.engine

BUDGET = 2048
NUM_BURNERS = 4


@pytest.fixture(scope="module")
def calibration_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    config = VllmServerConfig(
        model_dir=tiny_model_dir,
        # The tiny model's whole context: a decode stream must outlast a grid point, and at
        # 4,096 a fast step between the burners' time slices ran one out before a slow burst.
        max_model_len=16384,
        max_num_seqs=64,
        extra_args=("--max-num-batched-tokens", str(BUDGET)),
    )
    log_path = tmp_path_factory.mktemp("vllm-calibrate") / "server.log"
    with running_vllm(config, log_path) as server:
        yield server


def test_a_calibration_on_a_loaded_machine_is_refused_and_writes_nothing(
    calibration_server: VllmServer, tmp_path: Path
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
                "--endpoint", calibration_server.base_url, "--model", "tiny",
                "--shape", str(shape), "--gpu-name", "CPU-TEST",
                "--max-num-batched-tokens", str(BUDGET), "--out", str(out),
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
