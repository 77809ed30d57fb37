"""Fit the step-time model's parameters on published measurements, and check them on the rest.

    .venv/bin/python bench/step_model_fit.py [--markdown]

Reads bench/data/published_steps.yaml. Every point is priced with the model of
tokenpilot.core.steptime, written as a sum that is linear in the unknowns:

    time = overhead(engine) x steps + compute floor / compute efficiency(architecture)
         + memory floor / bandwidth efficiency + all-reduces x latency + all-reduce transfer

so a weighted least-squares fit (relative errors) over the `role: fit` points gives:

    bandwidth efficiency        one, pooled over the GPUs with published decode times
    compute efficiency          one per architecture with published prefill times
    overhead                    one per engine group (vllm-v1 is the one the profiles carry)
    all-reduce latency          one, pooled

It prints the fitted values (the built-in profiles in policies/gpus/ carry them, rounded) and
every point's prediction with the profiles' own parameters, fit and held-out apart. The held-out
errors are the ones docs/tuning.md reports; tests/unit/test_steptime_published.py checks them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.model_shape import MODEL_PRESETS, ModelShape
from tokenpilot.core.profiles import GPUProfile
from tokenpilot.core.roofline import PrefillChunk, StepWork, attention_pairs, step_work
from tokenpilot.core.steptime import (
    DEFAULT_INTERCONNECT_GBPS,
    LINK_EFFICIENCY,
    StepTimeModel,
    step_time_model,
)

DATA = Path(__file__).parent / "data" / "published_steps.yaml"
# Which compute efficiency a GPU's points fit; GPUs not listed only check other fits.
ARCHITECTURE = {
    "A100-40GB": "Ampere",
    "A100-80GB": "Ampere",
    "H100-80GB": "Hopper",
    "H200": "Hopper",
}
# The engine group whose overhead the profiles carry; points of other engines use it too.
SHIPPED_ENGINE = "vllm-v1"
FITTED_ENGINES = ("vllm-v1", "vllm-ci-v0", "splitwise-2023")


@dataclass(frozen=True)
class Point:
    id: str
    gpu: str
    shape: ModelShape
    tp: int
    kind: str
    num_decodes: int
    context_tokens: int
    prompt_tokens: int
    output_tokens: int
    published_ms: float
    engine: str
    role: str
    source: str
    derived: str

    def steps(self) -> list[tuple[int, int, tuple[PrefillChunk, ...]]]:
        """The point's steps as (decodes, decode context, prefill chunks)."""
        if self.kind == "prefill":
            return [(0, 0, (PrefillChunk(self.prompt_tokens),))]
        if self.kind == "decode":
            return [(self.num_decodes, self.num_decodes * self.context_tokens, ())]
        prefill = (0, 0, tuple(PrefillChunk(self.prompt_tokens) for _ in range(self.num_decodes)))
        decodes = [
            (self.num_decodes, self.num_decodes * (self.prompt_tokens + k), ())
            for k in range(1, self.output_tokens)
        ]
        return [prefill, *decodes]


@dataclass(frozen=True)
class Terms:
    """A point's time at 100 % of every rate, term by term (seconds)."""

    compute_floor_s: float
    memory_floor_s: float
    num_steps: int
    num_allreduces: int
    transfer_s: float


def load_points() -> tuple[list[Point], dict[str, str]]:
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    shapes = {name: ModelShape.model_validate(s) for name, s in data["shapes"].items()}
    shapes.update(MODEL_PRESETS)
    points = [
        Point(
            id=p["id"],
            gpu=p["gpu"],
            shape=shapes[p["model"]],
            tp=p.get("tensorParallelSize", 1),
            kind=p["kind"],
            num_decodes=p.get("numDecodes", 1),
            context_tokens=p.get("contextTokens", 0),
            prompt_tokens=p.get("promptTokens", 0),
            output_tokens=p.get("outputTokens", 0),
            published_ms=float(p["publishedMs"]),
            engine=p["engine"],
            role=p["role"],
            source=p["source"],
            derived=p.get("derived", ""),
        )
        for p in data["points"]
    ]
    return points, data["sources"]


def terms(point: Point, profile: GPUProfile) -> Terms:
    work: StepWork = step_work(point.shape, point.tp)
    link = (profile.interconnect_gbps or DEFAULT_INTERCONNECT_GBPS) * 1e9 * LINK_EFFICIENCY
    compute = memory = transfer = 0.0
    steps = point.steps()
    for num_decodes, context, chunks in steps:
        num_tokens = num_decodes + sum(c.num_new_tokens for c in chunks)
        kv_read = context + sum(c.num_computed_tokens for c in chunks)
        compute += work.flops(num_tokens, attention_pairs(context, chunks))
        memory += work.bytes_moved(num_tokens, kv_read)
        transfer += work.num_allreduces * work.allreduce_bytes_per_token * num_tokens / link
    return Terms(
        compute_floor_s=compute / (profile.bf16_dense_tflops * 1e12),
        memory_floor_s=memory / (profile.hbm_bandwidth_gbps * 1e9),
        num_steps=len(steps),
        num_allreduces=work.num_allreduces * len(steps),
        transfer_s=transfer,
    )


def unknowns() -> list[str]:
    return [
        "1/bandwidth efficiency",
        *(f"1/compute efficiency {a}" for a in sorted(set(ARCHITECTURE.values()))),
        *(f"overhead s {e}" for e in FITTED_ENGINES),
        "all-reduce latency s",
    ]


def row(point: Point, t: Terms) -> list[float]:
    names = unknowns()
    coefficients = [0.0] * len(names)
    coefficients[names.index("1/bandwidth efficiency")] = t.memory_floor_s
    coefficients[names.index(f"1/compute efficiency {ARCHITECTURE[point.gpu]}")] = t.compute_floor_s
    engine = point.engine if point.engine in FITTED_ENGINES else SHIPPED_ENGINE
    coefficients[names.index(f"overhead s {engine}")] = t.num_steps
    coefficients[names.index("all-reduce latency s")] = t.num_allreduces
    return coefficients


def solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Least squares by the normal equations and Gaussian elimination (a few unknowns)."""
    n = len(matrix[0])
    ata = [[sum(r[i] * r[j] for r in matrix) for j in range(n)] for i in range(n)]
    atb = [sum(r[i] * b for r, b in zip(matrix, rhs, strict=True)) for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(ata[r][col]))
        ata[col], ata[pivot] = ata[pivot], ata[col]
        atb[col], atb[pivot] = atb[pivot], atb[col]
        for r in range(col + 1, n):
            factor = ata[r][col] / ata[col][col]
            for c in range(col, n):
                ata[r][c] -= factor * ata[col][c]
            atb[r] -= factor * atb[col]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (atb[r] - sum(ata[r][c] * x[c] for c in range(r + 1, n))) / ata[r][r]
    return x


def fit(points: list[Point]) -> dict[str, float]:
    """The fitted parameters: efficiencies, overheads in ms, all-reduce latency in us."""
    catalog = load_builtin_catalog()
    matrix, rhs = [], []
    for point in points:
        if point.role != "fit":
            continue
        t = terms(point, catalog.get(point.gpu))
        target_s = point.published_ms / 1e3
        # Relative errors: each row divided by its own published time.
        matrix.append([c / target_s for c in row(point, t)])
        rhs.append((target_s - t.transfer_s) / target_s)
    x = dict(zip(unknowns(), solve(matrix, rhs), strict=True))
    fitted = {"bandwidth efficiency": 1 / x["1/bandwidth efficiency"]}
    for arch in sorted(set(ARCHITECTURE.values())):
        fitted[f"compute efficiency {arch}"] = 1 / x[f"1/compute efficiency {arch}"]
    for engine in FITTED_ENGINES:
        fitted[f"overhead ms {engine}"] = x[f"overhead s {engine}"] * 1e3
    fitted["all-reduce latency us"] = x["all-reduce latency s"] * 1e6
    return fitted


def predict_ms(point: Point, model: StepTimeModel, overhead_ms: float) -> float:
    """The point's time with the model as shipped, its overhead replaced by the engine's."""
    shipped_ms = model.parameters.overhead_ms.value
    total_s = sum(model.iteration_s(d, c, chunks) for d, c, chunks in point.steps())
    return total_s * 1e3 + (overhead_ms - shipped_ms) * len(point.steps())


def engine_overhead_ms(point: Point, fitted: dict[str, float], model: StepTimeModel) -> float:
    if point.engine in FITTED_ENGINES and point.engine != SHIPPED_ENGINE:
        return fitted[f"overhead ms {point.engine}"]
    return model.parameters.overhead_ms.value


def report(markdown: bool) -> int:
    points, _ = load_points()
    fitted = fit(points)
    catalog = load_builtin_catalog()
    print("fitted parameters (the profiles carry these, rounded):")
    for name, value in fitted.items():
        print(f"  {name:34s} {value:8.3f}")
    print()
    header = ("point", "role", "published ms", "predicted ms", "error")
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    worst = 0.0
    for point in points:
        profile = catalog.get(point.gpu)
        model = step_time_model(profile, point.shape, point.tp)
        predicted = predict_ms(point, model, engine_overhead_ms(point, fitted, model))
        error = predicted / point.published_ms - 1
        if point.role == "heldout":
            worst = max(worst, abs(error))
        cells = (
            point.id,
            point.role,
            f"{point.published_ms:g}",
            f"{predicted:.1f}",
            f"{error:+.0%}",
        )
        if markdown:
            print("| " + " | ".join(cells) + " |")
        else:
            print(f"  {cells[0]:32s} {cells[1]:8s} {cells[2]:>10s} {cells[3]:>10s} {cells[4]:>6s}")
    print(f"\nlargest held-out error: {worst:.0%}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    return report(args.markdown)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["ARCHITECTURE", "Point", "engine_overhead_ms", "fit", "load_points", "predict_ms"]
