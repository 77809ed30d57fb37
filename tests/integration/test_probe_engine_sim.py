"""The interference probe against engine-sim.

First on a step timer with a known answer (the probe must read it back), then the issue's
acceptance: engine-sim with the H100 and L40S step models, probed with the study's protocol at
32 decodes, must reproduce the shape of the study's heatmaps. The simulated heatmap is printed
beside the measured one (`pytest -s` shows it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.core.profiles import GPUProfile
from tokenpilot.core.steptime import StepTimeModel
from tokenpilot_lab.engine_sim import options, timing
from tokenpilot_lab.engine_sim.server import ServedModel, running
from tokenpilot_lab.probe import (
    ProbeResult,
    ProbeSettings,
    format_heatmap,
    run_heatmap,
    run_probe,
)
from tokenpilot_lab.sim import EngineConfig

CATALOG = load_builtin_catalog()


@dataclass(frozen=True)
class FullStepTimer:
    """10 ms a step, 40 ms for a step that fills the 4096-token budget."""

    def iteration_s(self, num_decode: int, num_prefill: int, num_kv_read: int) -> float:
        return 0.040 if num_decode + num_prefill >= 4096 else 0.010


async def test_the_probe_reads_back_a_known_interference() -> None:
    config = EngineConfig(num_kv_blocks=4096, max_num_batched_tokens=4096, max_num_seqs=64)
    served = ServedModel(("m",), "m", config.max_model_len)
    async with running(config, FullStepTimer(), served) as (_, url):
        base = ProbeSettings(url=url, num_decode=8, settle_s=0.2, baseline_s=0.5,
                             recovery_s=0.2, decode_prompt_len=64, num_bursts=5)  # fmt: skip
        full = await run_probe(replace(base, num_prefill=2, prefill_len=2048))
        absorbed = await run_probe(replace(base, num_prefill=1, prefill_len=512))
    # 2 x 2048 + 8 decodes: one full 40 ms step (the 16-token tail runs at decode speed). The
    # median of five bursts: on a loaded host one burst's requests can straddle a step.
    assert full.interference_pct == pytest.approx(300.0, abs=1.0)
    assert full.num_mixed_iterations == 1
    assert absorbed.interference_pct == pytest.approx(0.0, abs=1.0)
    assert full.recovery_iterations == absorbed.recovery_iterations == 1


# The acceptance, per GPU: the budget the study ran at, the heatmap grid it measured.
ACCEPTANCE = {
    "H100-80GB": (8192, [1, 2, 4, 8, 16], [128, 512, 1024, 2048, 4096]),
    "L40S": (4096, [1, 2, 4, 8], [128, 512, 1024, 2048]),
}
NUM_DECODE = 32


def measured_cells(profile: GPUProfile) -> dict[tuple[int, int], float]:
    assert profile.measured is not None
    heatmap = profile.measured.heatmap
    if heatmap is not None:
        return {(c.num_prefill, c.prefill_len): c.interference_pct for c in heatmap.cells}
    # L40S has no heatmap in the study, only its 4 x 2048 row; the shape is the same.
    return {
        (r.num_prefill, r.prefill_len): (r.mixed_ms / r.baseline_ms - 1) * 100
        for r in profile.measured.mixed_steps
        if r.num_decode == NUM_DECODE
    }


@pytest.mark.parametrize("gpu", sorted(ACCEPTANCE))
async def test_engine_sim_reproduces_the_studys_heatmap_shape(gpu: str) -> None:
    budget, rows, lens = ACCEPTANCE[gpu]
    opts = options.parse(["--gpu", gpu, "--max-num-batched-tokens", str(budget)])
    config, model, _ = timing.build(opts)
    assert isinstance(model, StepTimeModel)
    profile = CATALOG.get(gpu)
    served = ServedModel(("m",), "m", config.max_model_len)
    async with running(config, model, served) as (_, url):
        base = ProbeSettings(
            url=url,
            num_decode=NUM_DECODE,
            settle_s=0.3,
            baseline_s=1.0,
            recovery_s=0.3,
            num_bursts=3,
            # The study's decodes carried about this much context (the model's calibration).
            decode_prompt_len=model.calibration_context_tokens or 1024,
        )
        results = await run_heatmap(base, rows, lens)
    measured = measured_cells(profile)
    print(f"\n{gpu}, --max-num-batched-tokens {budget}, {NUM_DECODE} decodes: engine-sim "
          "(study in parentheses)")  # fmt: skip
    print(format_heatmap(results, {k: f"{v:.0f}%" for k, v in measured.items()}))
    check_shape(results, measured)


def check_shape(results: list[ProbeResult], measured: dict[tuple[int, int], float]) -> None:
    by_cell = {(r.num_prefill, r.prefill_len): r for r in results}
    for (num_prefill, prefill_len), result in by_cell.items():
        study = measured.get((num_prefill, prefill_len))
        cell = f"{num_prefill} x {prefill_len}: {result.describe()}"
        if study is not None and study < 10:
            assert result.interference_pct < 10, cell
        if num_prefill >= 4 and prefill_len >= 2048:
            assert result.interference_pct > 200, cell
        assert result.recovery_iterations <= 2, cell
