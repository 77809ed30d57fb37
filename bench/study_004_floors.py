"""Study 004's figures beside their physical floors and the step model (docs/tuning.md).

    .venv/bin/python bench/study_004_floors.py

Reads bench/data/study_004.yaml (the study as published: Llama-3.1-8B, BF16, vLLM V1, one GPU).
For every mixed time (a burst of prompts beside running decodes) it prints:

  - own-step floor: the floor of one prompt in a step of its own beside the decodes, at 100 % of
    the datasheet. A mixed time is the mean of the steps that carried the burst, and this is the
    cheapest any of them can be, so a time under it is impossible however the engine scheduled
    the burst. The profile loader refuses exactly these.
  - packed floor: the mean floor of the steps that carry the burst (the study's "mixed
    iterations") when its prompts arrive together and fill the study's budget (its threshold),
    as the study's protocol sends them.
  - the step model's mixed time, scheduled the packed way, decodes at 1,024 tokens of context
    (the study does not state its decodes' context; the floors count one token, as the loader).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.gpu_profile import MeasuredInterference
from tokenpilot.api.model_shape import model_preset
from tokenpilot.core.calibration.grid import burst_steps
from tokenpilot.core.roofline import PrefillChunk, step_floor_s, step_work
from tokenpilot.core.steptime import step_time_model

DATA = Path(__file__).parent / "data" / "study_004.yaml"
DECODE_CONTEXT_TOKENS = 1024


def packed_steps(
    num_decodes: int, num_prefill: int, prefill_len: int, budget: int
) -> list[list[PrefillChunk]]:
    """The burst's prefill chunks per step, as the engine schedules them (FCFS, each step
    filling the budget after the decodes)."""
    steps = burst_steps(num_decodes, 0, [prefill_len] * num_prefill, budget)
    return [list(step.prefill_chunks) for step in steps]


def main() -> int:
    study = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    for gpu, block in study.items():
        print("\n".join(gpu_tables(gpu, MeasuredInterference.model_validate(block))))
    return 0


def gpu_tables(gpu: str, measured: MeasuredInterference) -> list[str]:
    """The mixed and decode tables of one GPU, as Markdown lines."""
    profile = load_builtin_catalog().get(gpu)
    shape = model_preset("llama-3.1-8b")
    work = step_work(shape, 1)
    model = step_time_model(profile, shape)
    peak, bandwidth = profile.bf16_dense_tflops, profile.hbm_bandwidth_gbps
    budget = measured.threshold_prefill_tokens
    lines: list[str] = []

    def floor_ms(decodes: int, chunks: list[PrefillChunk]) -> float:
        # Each decode at one token of context: the most lenient reading, as the loader's.
        return 1e3 * step_floor_s(work, peak, bandwidth, decodes, decodes, chunks)

    def packed(decodes: int, num_prefill: int, prefill_len: int) -> tuple[float, float]:
        """Mean floor and mean model time (ms) of the steps that carry the burst's prefill,
        the study's "mixed iterations", packed as its protocol sends the burst."""
        steps = packed_steps(decodes, num_prefill, prefill_len, budget)
        context = decodes * DECODE_CONTEXT_TOKENS
        floors = [floor_ms(decodes, s) for s in steps]
        models = [1e3 * model.iteration_s(decodes, context, s) for s in steps]
        return sum(floors) / len(floors), sum(models) / len(models)

    def row(decodes: int, num_prefill: int, prefill_len: int, mixed: str, ms: float) -> str:
        own = floor_ms(decodes, [PrefillChunk(min(prefill_len, budget))])
        packed_floor, model_ms = packed(decodes, num_prefill, prefill_len)
        verdict = (
            "impossible"
            if ms < own
            else "possible only with prompts in separate steps"
            if ms < packed_floor
            else "possible"
        )
        return (
            f"| {num_prefill} x {prefill_len} | {decodes} | {mixed} | {own:.1f} | "
            f"{packed_floor:.1f} | {model_ms:.1f} | {verdict} |"
        )

    lines.append(f"\n### {gpu} ({peak:g} TFLOPS, {bandwidth:g} GB/s; budget {budget:,})\n")
    lines.append(
        "| burst | decodes | study mixed ms | own-step floor | packed floor | "
        "model (packed) | verdict |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for r in measured.mixed_steps:
        lines.append(row(r.num_decode, r.num_prefill, r.prefill_len, f"{r.mixed_ms:g}", r.mixed_ms))
    heatmap = measured.heatmap
    if heatmap is not None:
        for c in heatmap.cells:
            ms = heatmap.baseline_ms * (1 + c.interference_pct / 100)
            bound = "<" if c.upper_bound else ""
            text = f"{bound}{ms:.1f} ({bound}+{c.interference_pct:g} %)"
            lines.append(row(heatmap.num_decode, c.num_prefill, c.prefill_len, text, ms))
    lines.append("\n| decodes | study baseline ms | floor (context 1) | model at 1,024 context |")
    lines.append("|---|---|---|---|")
    for d in measured.decode_steps:
        model_ms = 1e3 * model.decode_step_s(d.num_decode, DECODE_CONTEXT_TOKENS)
        lines.append(
            f"| {d.num_decode} | {d.step_ms:g} | {floor_ms(d.num_decode, []):.1f} | "
            f"{model_ms:.1f} |"
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
