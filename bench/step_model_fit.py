"""Fit the step-time model's parameters on published measurements, and check them on the rest.

    .venv/bin/python bench/step_model_fit.py [--markdown]

Reads bench/data/published_steps.yaml and fits in two stages, each by least squares on relative
errors (Levenberg-Marquardt; a handful of unknowns):

1. The overlap exponent p of the smooth roofline, on the `kernels` rows: the linear layers of one
   layer timed alone on both sides of the ridge, as (FLOPs / achieved FLOPS)**p + (weight bytes /
   achieved bandwidth)**p, to the power 1/p. One p pooled over the GPUs with kernel timings; each
   GPU's kernel-level efficiencies are nuisance parameters (the profiles do not carry them).
2. With p fixed, every `role: fit` point priced with the model of tokenpilot.core.steptime
   (overhead + each kernel group's smooth roofline + all-reduces, step by step):

    bandwidth efficiency        one, pooled over the GPUs with published decode times
    compute efficiency          one per architecture with published prefill times, and for
                                Hopper one more for the vLLM build Splitwise profiled in 2023
                                (before Hopper-tuned attention and GEMMs; the profiles carry
                                vLLM V1's)
    overhead                    one per engine group (vllm-v1 is the one the profiles carry)
    all-reduce latency          one, pooled

An `offline` point (many requests at once, as vLLM's benchmark_throughput sends them) is
priced step by step too: its steps are the lab's engine model scheduling the requests under
the point's budget, cap and KV cache, which with every request present from the start does
not depend on how long a step takes.

It prints the fitted values (the built-in profiles in policies/gpus/ carry them, rounded), the
kernel rows beside the fit and the two limits (compute and memory added; the larger of the two),
every point's prediction with the profiles' own parameters (an engine group's own overhead, and
compute efficiency where it has one), and the headline table: every held-out point beside its
publication, worst first. The held-out errors are the ones docs/tuning.md reports;
tests/unit/test_steptime_published.py checks them.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from tokenpilot.adapters.profiles import load_builtin_catalog
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.model_shape import MODEL_PRESETS, ModelShape
from tokenpilot.core.capacity import plan_capacity
from tokenpilot.core.roofline import PrefillChunk, StepPricer, StepWork, step_totals, step_work
from tokenpilot.core.steptime import (
    DEFAULT_INTERCONNECT_GBPS,
    LINK_EFFICIENCY,
    StepTimeModel,
    smooth_max,
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
ARCHITECTURES = tuple(sorted(set(ARCHITECTURE.values())))
# Engine groups with a compute efficiency of their own on an architecture: the 2023 vLLM build
# Splitwise profiled ran Hopper without its tuned attention and GEMMs. Everything else on that
# architecture shares the one the profiles carry.
ENGINE_COMPUTE = {("Hopper", "splitwise-2023"): "Hopper (splitwise-2023)"}
COMPUTE_GROUPS = (*ARCHITECTURES, *sorted(set(ENGINE_COMPUTE.values())))


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
    # `offline` points: the engine's limits and how many requests it was given at once.
    num_requests: int = 0
    max_num_batched_tokens: int = 0
    max_num_seqs: int = 0
    gpu_memory_utilization: float = 0.9
    model_name: str = ""

    @property
    def compute_group(self) -> str:
        """Which fitted compute efficiency prices this point's arithmetic."""
        arch = ARCHITECTURE.get(self.gpu, "")
        return ENGINE_COMPUTE.get((arch, self.engine), arch)

    def steps(self) -> list[tuple[int, int, tuple[PrefillChunk, ...]]]:
        """The point's steps as (decodes, decode context, prefill chunks)."""
        if self.kind == "offline":
            return offline_steps(self)
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
class KernelRows:
    """One GPU's linear-layer timings of one layer, by tokens in the step."""

    id: str
    gpu: str
    flops_per_token: float
    weight_bytes: float
    ms_by_tokens: dict[int, float]
    source: str


@dataclass(frozen=True)
class StepTerms:
    """One step of a point at 100 % of every rate, group by group (seconds)."""

    linear_compute_s: float
    linear_memory_s: float
    attention_compute_s: float
    attention_memory_s: float
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
            num_requests=p.get("numRequests", 0),
            max_num_batched_tokens=p.get("maxNumBatchedTokens", 0),
            max_num_seqs=p.get("maxNumSeqs", 0),
            gpu_memory_utilization=p.get("gpuMemoryUtilization", 0.9),
            model_name=p["model"],
        )
        for p in data["points"]
    ]
    return points, data["sources"]


@dataclass
class _RecordingPricer:
    """A step pricer that keeps every step it was asked to price."""

    pricer: StepPricer
    steps: list[tuple[int, int, tuple[PrefillChunk, ...]]]

    def iteration_s(
        self,
        num_decodes: int,
        decode_context_tokens: int,
        prefill_chunks: Sequence[PrefillChunk] = (),
    ) -> float:
        self.steps.append((num_decodes, decode_context_tokens, tuple(prefill_chunks)))
        return self.pricer.iteration_s(num_decodes, decode_context_tokens, prefill_chunks)


_OFFLINE_STEPS: dict[str, list[tuple[int, int, tuple[PrefillChunk, ...]]]] = {}


def offline_steps(point: Point) -> list[tuple[int, int, tuple[PrefillChunk, ...]]]:
    """The steps the lab's engine model (vLLM V1 chunked prefill, KV-limited admission and
    preemption) schedules for the point's requests, all present from the start, without prefix
    caching (random prompts). Step durations only order events in time, so the schedule, and
    with it this list, is the same whatever the step model's parameters."""
    if point.id not in _OFFLINE_STEPS:
        from tokenpilot_lab.sim import Engine, EngineConfig, SimRequest

        profile = load_builtin_catalog().get(point.gpu)
        context = point.prompt_tokens + point.output_tokens
        capacity = plan_capacity(
            profile, point.shape, point.tp, point.gpu_memory_utilization, context
        )
        config = EngineConfig.planned(
            capacity,
            max_num_batched_tokens=point.max_num_batched_tokens,
            max_num_seqs=point.max_num_seqs,
            enable_prefix_caching=False,
        )
        recorder = _RecordingPricer(step_time_model(profile, point.shape, point.tp), [])
        engine = Engine(config, recorder)
        for i in range(point.num_requests):
            engine.submit(
                SimRequest(f"{point.id}-{i}", point.prompt_tokens, point.output_tokens), 0.0
            )
        engine.drain()
        _OFFLINE_STEPS[point.id] = recorder.steps
    return _OFFLINE_STEPS[point.id]


def load_kernels() -> list[KernelRows]:
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return [
        KernelRows(
            id=k["id"],
            gpu=k["gpu"],
            flops_per_token=2.0 * k["paramsPerLayer"],
            weight_bytes=float(k["paramsPerLayer"] * k["bytesPerParam"]),
            ms_by_tokens={int(n): float(ms) for n, ms in k["msByTokens"].items()},
            source=k["source"],
        )
        for k in data["kernels"]
    ]


def least_squares(
    residuals: Callable[[list[float]], list[float]],
    x0: Sequence[float],
    lower: Sequence[float],
) -> list[float]:
    """Levenberg-Marquardt with a numerical Jacobian; `lower` bounds each unknown."""
    x = list(x0)
    r = residuals(x)
    cost = sum(v * v for v in r)
    damping = 1e-3
    for _ in range(500):
        jacobian = []
        for i in range(len(x)):
            step = 1e-7 * max(abs(x[i]), 1e-9)
            shifted = list(x)
            shifted[i] += step
            jacobian.append([(a - b) / step for a, b in zip(residuals(shifted), r, strict=True)])
        n = len(x)
        jtj = [
            [sum(a * b for a, b in zip(jacobian[i], jacobian[j], strict=True)) for j in range(n)]
            for i in range(n)
        ]
        jtr = [-sum(a * b for a, b in zip(jacobian[i], r, strict=True)) for i in range(n)]
        while True:
            damped = [
                [v * (1 + damping) if i == j else v for j, v in enumerate(row)]
                for i, row in enumerate(jtj)
            ]
            delta = solve_linear(damped, jtr)
            trial = [max(lo, v + d) for v, d, lo in zip(x, delta, lower, strict=True)]
            trial_r = residuals(trial)
            trial_cost = sum(v * v for v in trial_r)
            if trial_cost < cost:
                converged = cost - trial_cost < 1e-14 * max(cost, 1e-30)
                x, r, cost = trial, trial_r, trial_cost
                damping = max(damping / 3, 1e-12)
                break
            damping *= 4
            if damping > 1e12:
                return x
        if converged:
            return x
    return x


def solve_linear(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """A square linear system by Gaussian elimination with partial pivoting."""
    n = len(rhs)
    a = [[*row, b] for row, b in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            for c in range(col, n + 1):
                a[r][c] -= factor * a[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x


# ---- stage 1: the overlap exponent, on kernel timings ----


def kernel_ms(
    rows: KernelRows, profile: GPUProfile, tokens: int, inv_c: float, inv_m: float, p: float
) -> float:
    compute_ms = rows.flops_per_token * tokens / (profile.bf16_dense_tflops * 1e9) * inv_c
    memory_ms = rows.weight_bytes / (profile.hbm_bandwidth_gbps * 1e6) * inv_m
    return smooth_max(compute_ms, memory_ms, p)


def fit_overlap(kernels: list[KernelRows]) -> dict[str, float]:
    """p pooled over every GPU's kernel rows, with each GPU's kernel efficiencies."""
    catalog = load_builtin_catalog()

    def residuals(x: list[float]) -> list[float]:
        p = x[-1]
        out = []
        for i, rows in enumerate(kernels):
            profile = catalog.get(rows.gpu)
            for tokens, ms in rows.ms_by_tokens.items():
                predicted = kernel_ms(rows, profile, tokens, x[2 * i], x[2 * i + 1], p)
                out.append(predicted / ms - 1)
        return out

    x0 = [1 / 0.75] * (2 * len(kernels)) + [1.5]
    x = least_squares(residuals, x0, [1.0] * len(x0))
    fitted = {"overlap exponent": x[-1]}
    for i, rows in enumerate(kernels):
        fitted[f"kernel compute efficiency {rows.gpu}"] = 1 / x[2 * i]
        fitted[f"kernel bandwidth efficiency {rows.gpu}"] = 1 / x[2 * i + 1]
    return fitted


# ---- stage 2: efficiencies, overheads and all-reduce latency, with p fixed ----


def point_terms(point: Point, profile: GPUProfile) -> list[StepTerms]:
    work: StepWork = step_work(point.shape, point.tp)
    link = (profile.interconnect_gbps or DEFAULT_INTERCONNECT_GBPS) * 1e9 * LINK_EFFICIENCY
    flops_s = 1 / (profile.bf16_dense_tflops * 1e12)
    bytes_s = 1 / (profile.hbm_bandwidth_gbps * 1e9)
    terms = []
    for num_decodes, context, chunks in point.steps():
        num_tokens, pairs, kv_read = step_totals(num_decodes, context, chunks)
        terms.append(
            StepTerms(
                linear_compute_s=work.flops_per_token * num_tokens * flops_s,
                linear_memory_s=work.weight_bytes * bytes_s,
                attention_compute_s=work.flops_per_pair * pairs * flops_s,
                attention_memory_s=work.kv_bytes_per_token * (kv_read + num_tokens) * bytes_s,
                num_allreduces=work.num_allreduces,
                transfer_s=work.num_allreduces * work.allreduce_bytes_per_token * num_tokens / link,
            )
        )
    return terms


def unknowns() -> list[str]:
    return [
        "1/bandwidth efficiency",
        *(f"1/compute efficiency {g}" for g in COMPUTE_GROUPS),
        *(f"overhead s {e}" for e in FITTED_ENGINES),
        "all-reduce latency s",
    ]


def point_s(point: Point, terms: list[StepTerms], x: dict[str, float], p: float) -> float:
    """The point's time in seconds under the unknowns `x` and overlap exponent `p`."""
    inv_m = x["1/bandwidth efficiency"]
    inv_c = x[f"1/compute efficiency {point.compute_group}"]
    engine = point.engine if point.engine in FITTED_ENGINES else SHIPPED_ENGINE
    overhead_s = x[f"overhead s {engine}"]
    latency_s = x["all-reduce latency s"]
    return sum(
        overhead_s
        + smooth_max(t.linear_compute_s * inv_c, t.linear_memory_s * inv_m, p)
        + smooth_max(t.attention_compute_s * inv_c, t.attention_memory_s * inv_m, p)
        + t.num_allreduces * latency_s
        + t.transfer_s
        for t in terms
    )


def fit(points: list[Point], kernels: list[KernelRows] | None = None) -> dict[str, float]:
    """The fitted parameters: p (stage 1), then efficiencies, overheads in ms and the
    all-reduce latency in us on the `fit` points with p fixed (stage 2)."""
    overlap = fit_overlap(load_kernels() if kernels is None else kernels)
    p = overlap["overlap exponent"]
    catalog = load_builtin_catalog()
    fit_points = [(pt, point_terms(pt, catalog.get(pt.gpu))) for pt in points if pt.role == "fit"]
    names = unknowns()

    def residuals(values: list[float]) -> list[float]:
        x = dict(zip(names, values, strict=True))
        return [point_s(pt, terms, x, p) * 1e3 / pt.published_ms - 1 for pt, terms in fit_points]

    start = {n: 1 / 0.8 if n.startswith("1/") else 1e-3 for n in names}
    start["all-reduce latency s"] = 30e-6
    lower = [1.0 if n.startswith("1/") else 0.0 for n in names]
    values = least_squares(residuals, [start[n] for n in names], lower)
    x = dict(zip(names, values, strict=True))
    fitted = {"overlap exponent": p, "bandwidth efficiency": 1 / x["1/bandwidth efficiency"]}
    for group in COMPUTE_GROUPS:
        fitted[f"compute efficiency {group}"] = 1 / x[f"1/compute efficiency {group}"]
    for engine in FITTED_ENGINES:
        fitted[f"overhead ms {engine}"] = x[f"overhead s {engine}"] * 1e3
    fitted["all-reduce latency us"] = x["all-reduce latency s"] * 1e6
    fitted.update({k: v for k, v in overlap.items() if k != "overlap exponent"})
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


def engine_model(point: Point, fitted: dict[str, float]) -> StepTimeModel:
    """The point's GPU as its profile prices it, with the compute efficiency of the point's
    engine where that engine has its own (`ENGINE_COMPUTE`)."""
    profile = load_builtin_catalog().get(point.gpu)
    arch = ARCHITECTURE.get(point.gpu, "")
    params = profile.step_model
    if (arch, point.engine) in ENGINE_COMPUTE and params is not None:
        value = fitted[f"compute efficiency {point.compute_group}"]
        compute = params.compute_efficiency.model_copy(update={"value": value})
        profile = profile.model_copy(
            update={"step_model": params.model_copy(update={"compute_efficiency": compute})}
        )
    return step_time_model(profile, point.shape, point.tp)


def prediction_ms(point: Point, fitted: dict[str, float]) -> float:
    """The point's time as the profiles price it, with its engine's overhead (and compute
    efficiency, where it has its own) in place of vLLM V1's."""
    model = engine_model(point, fitted)
    return predict_ms(point, model, engine_overhead_ms(point, fitted, model))


HEADLINE_HEADER = (
    "point",
    "GPU, model, TP",
    "what",
    "published ms",
    "predicted ms",
    "error",
    "source",
)


@dataclass(frozen=True)
class HeadlineRow:
    """One held-out point beside its publication."""

    point: Point
    predicted_ms: float

    @property
    def error(self) -> float:
        return self.predicted_ms / self.point.published_ms - 1

    def cells(self) -> tuple[str, ...]:
        p = self.point
        return (
            p.id,
            f"{p.gpu}, {p.model_name}, TP{p.tp}",
            describe(p),
            f"{p.published_ms:g}",
            f"{self.predicted_ms:.1f}",
            f"{self.error:+.0%}",
            p.source,
        )


def describe(point: Point) -> str:
    """What the point times, in a few words."""
    if point.kind == "prefill":
        return f"prefill, {point.prompt_tokens:,}-token prompt"
    if point.kind == "decode":
        return f"decode step, batch {point.num_decodes}, {point.context_tokens:,} context"
    if point.kind == "offline":
        return (
            f"{point.num_requests:,} requests at once, {point.prompt_tokens:,} in / "
            f"{point.output_tokens} out, budget {point.max_num_batched_tokens:,}"
        )
    return f"batch {point.num_decodes}, {point.prompt_tokens:,} in / {point.output_tokens} out"


def headline_rows(points: list[Point], predicted: dict[str, float]) -> list[HeadlineRow]:
    """Every held-out point beside its publication, the largest error first."""
    rows = [HeadlineRow(p, predicted[p.id]) for p in points if p.role == "heldout"]
    return sorted(rows, key=lambda row: (-abs(row.error), row.point.id))


def _table(markdown: bool, header: Sequence[str], rows: list[Sequence[str]]) -> None:
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for cells in rows:
            print("| " + " | ".join(cells) + " |")
    else:
        for cells in [header, *rows]:
            print("  " + " ".join(f"{c:>12s}" if i else f"{c:32s}" for i, c in enumerate(cells)))


def report(markdown: bool) -> int:
    points, _ = load_points()
    kernels = load_kernels()
    fitted = fit(points, kernels)
    catalog = load_builtin_catalog()
    print("fitted parameters (the profiles carry these, rounded; kernel-level ones are not):")
    for name, value in fitted.items():
        print(f"  {name:44s} {value:8.3f}")
    for rows in kernels:
        alone = fit_overlap([rows])["overlap exponent"]
        print(f"  {'overlap exponent, ' + rows.gpu + ' kernels alone':44s} {alone:8.3f}")
    p = fitted["overlap exponent"]
    print(
        "\nkernel rows: one layer's linear layers, ms (fit; the sum and the max at the same "
        "efficiencies)\n"
    )
    kernel_rows = []
    for rows in kernels:
        profile = catalog.get(rows.gpu)
        inv_c = 1 / fitted[f"kernel compute efficiency {rows.gpu}"]
        inv_m = 1 / fitted[f"kernel bandwidth efficiency {rows.gpu}"]
        for tokens, ms in rows.ms_by_tokens.items():
            smooth = kernel_ms(rows, profile, tokens, inv_c, inv_m, p)
            added = kernel_ms(rows, profile, tokens, inv_c, inv_m, 1.0)
            larger = kernel_ms(rows, profile, tokens, inv_c, inv_m, math.inf)
            kernel_rows.append(
                (
                    rows.gpu,
                    f"{tokens}",
                    f"{ms:g}",
                    f"{smooth:.3f} ({smooth / ms - 1:+.0%})",
                    f"{added / ms - 1:+.0%}",
                    f"{larger / ms - 1:+.0%}",
                )
            )
    _table(markdown, ("GPU", "tokens", "measured ms", f"p {p:.2f}", "sum", "max"), kernel_rows)
    print()
    point_rows = []
    predicted = {point.id: prediction_ms(point, fitted) for point in points}
    for point in points:
        error = predicted[point.id] / point.published_ms - 1
        role = "held out" if point.role == "heldout" else point.role
        point_rows.append(
            (
                point.id,
                role,
                f"{point.published_ms:g}",
                f"{predicted[point.id]:.1f}",
                f"{error:+.0%}",
            )
        )
    _table(markdown, ("point", "role", "published ms", "predicted ms", "error"), point_rows)
    print("\nprediction beside publication: every held-out point, worst first\n")
    headline = headline_rows(points, predicted)
    _table(markdown, HEADLINE_HEADER, [row.cells() for row in headline])
    worst = max((abs(row.error) for row in headline), default=0.0)
    print(f"\nlargest held-out error: {worst:.0%}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    return report(args.markdown)


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "ARCHITECTURE",
    "KernelRows",
    "Point",
    "engine_overhead_ms",
    "fit",
    "fit_overlap",
    "load_kernels",
    "load_points",
    "predict_ms",
]
