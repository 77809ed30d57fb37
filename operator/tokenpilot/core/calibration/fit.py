"""Fit the step model's rates to measured step times.

The step model (`tokenpilot.core.steptime`, tensor parallelism 1) prices a step as

    step_s = overhead_s + smooth_max(s_per_flop x linear FLOPs, s_per_byte x weight bytes, p)
                        + smooth_max(s_per_flop x attention FLOPs, s_per_byte x KV bytes, p)

with one rate per resource: the weights and the KV cache share the memory bus, so one
seconds-per-byte prices both (the KV term varies with decodes and context and so pins the rate;
the weights, constant for one model, then separate from the overhead). Four numbers are fitted:
overhead_s, s_per_byte, s_per_flop and p, by least squares on relative errors (a 5 ms and a
500 ms step weigh alike). It starts from the additive model (p = 1), which is linear in the
three rates and solved exactly, then Levenberg-Marquardt refines all four in log space (so rates
stay positive), from a small grid of starts around it, keeping the best. An observation is
the mean of the steps it spans (a burst over the budget spans several), priced step by step.

Uncertainties are one standard error from the fit's covariance, s^2 (J^T J)^-1 in log space,
so each is relative to its value; a rate the data cannot pin (compute on a card that is
memory-bound at every step measured) gets a large one, and its value is then only a bound.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokenpilot.core.calibration.grid import Step
from tokenpilot.core.roofline import StepWork, step_totals
from tokenpilot.core.steptime import smooth_max

NUM_PARAMETERS = 4
_MAX_ITERATIONS = 200
# Starting points: the weight read and the overhead trade off against p (a larger p hides more
# compute, which a larger weight read or overhead can mimic), and the fit has local minima
# there; starting from a small grid of each and keeping the best finds the global one on exact
# data (tests/unit/test_calibration_core.py).
_STARTING_P = (1.2, 2.5, 5.0)
_SCALES = (1.0, 0.5, 2.0, 3.0, 0.3)
_EXACT_SSE = 1e-20
_MAX_P = 50.0


@dataclass(frozen=True, slots=True)
class Observation:
    """A measured time: the mean of the steps it spans."""

    steps: tuple[Step, ...]
    measured_s: float
    held_out: bool
    what: str


@dataclass(frozen=True, slots=True)
class StepRates:
    overhead_s: float
    s_per_byte: float
    s_per_flop: float
    overlap_exponent: float

    def step_s(self, features: tuple[float, float, float, float]) -> float:
        linear_flops, weight_bytes, attention_flops, kv_bytes = features
        p = self.overlap_exponent
        return (
            self.overhead_s
            + smooth_max(self.s_per_flop * linear_flops, self.s_per_byte * weight_bytes, p)
            + smooth_max(self.s_per_flop * attention_flops, self.s_per_byte * kv_bytes, p)
        )


@dataclass(frozen=True, slots=True)
class Residual:
    what: str
    measured_s: float
    predicted_s: float
    held_out: bool

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


@dataclass(frozen=True, slots=True)
class StepFit:
    rates: StepRates
    # One standard error of each parameter, relative to its value (inf: not determined).
    relative_uncertainty: tuple[float, float, float, float]
    residuals: tuple[Residual, ...]

    @property
    def held_out(self) -> tuple[Residual, ...]:
        return tuple(r for r in self.residuals if r.held_out)

    @property
    def fitted(self) -> tuple[Residual, ...]:
        return tuple(r for r in self.residuals if not r.held_out)

    def max_held_out_error(self) -> float:
        return max((abs(r.error) for r in self.held_out), default=math.inf)


def step_features(work: StepWork, step: Step) -> tuple[float, float, float, float]:
    """(linear FLOPs, weight bytes, attention FLOPs, KV bytes) of one step on one GPU."""
    num_tokens, pairs, kv_read = step_totals(
        step.num_decode, step.decode_context_tokens, step.prefill_chunks
    )
    return (
        work.flops_per_token * num_tokens,
        work.weight_bytes,
        work.flops_per_pair * pairs,
        work.kv_bytes_per_token * (kv_read + num_tokens),
    )


class FitError(ValueError):
    """Too little data, or data the model cannot be fitted to."""


def fit_step_rates(work: StepWork, observations: Sequence[Observation]) -> StepFit:
    """Fit on the observations not held out; residuals on all of them."""
    train = [o for o in observations if not o.held_out]
    if len(train) <= NUM_PARAMETERS:
        raise FitError(
            f"{len(train)} observations to fit {NUM_PARAMETERS} parameters; measure more points"
        )
    if any(not o.measured_s > 0 or not o.steps for o in observations):
        raise FitError("every observation needs a positive time and at least one step")
    features = [[step_features(work, s) for s in o.steps] for o in train]
    measured = [o.measured_s for o in train]
    start = _additive_start(features, measured)
    best: tuple[float, list[float]] | None = None
    for p, byte_scale, overhead_scale in itertools.product(_STARTING_P, _SCALES, _SCALES):
        u = _levenberg_marquardt(
            [
                start[0] + math.log(overhead_scale),
                start[1] + math.log(byte_scale),
                start[2],
                math.log(p - 1.0),
            ],
            features,
            measured,
        )
        sse = _sse(u, features, measured)
        if best is None or sse < best[0]:
            best = (sse, u)
        if sse < _EXACT_SSE:
            break
    assert best is not None
    sse, u = best
    rates = _rates(u)
    uncertainty = _uncertainty(u, features, measured, sse)
    residuals = tuple(
        Residual(
            what=o.what,
            measured_s=o.measured_s,
            predicted_s=_mean_step_s(rates, [step_features(work, s) for s in o.steps]),
            held_out=o.held_out,
        )
        for o in observations
    )
    return StepFit(rates, uncertainty, residuals)


Features = list[tuple[float, float, float, float]]


def _mean_step_s(rates: StepRates, steps: Features) -> float:
    return sum(rates.step_s(f) for f in steps) / len(steps)


def _rates(u: Sequence[float]) -> StepRates:
    return StepRates(
        overhead_s=math.exp(u[0]),
        s_per_byte=math.exp(u[1]),
        s_per_flop=math.exp(u[2]),
        overlap_exponent=1.0 + min(math.exp(u[3]), _MAX_P - 1.0),
    )


def _relative_errors(
    u: Sequence[float], features: Sequence[Features], measured: Sequence[float]
) -> list[float]:
    rates = _rates(u)
    return [_mean_step_s(rates, f) / m - 1.0 for f, m in zip(features, measured, strict=True)]


def _sse(u: Sequence[float], features: Sequence[Features], measured: Sequence[float]) -> float:
    return sum(r * r for r in _relative_errors(u, features, measured))


def _additive_start(features: Sequence[Features], measured: Sequence[float]) -> list[float]:
    """log(overhead, s_per_byte, s_per_flop) of the additive model (p = 1), linear in them:
    each relative-error row is [1, bytes, FLOPs] / measured. A rate the solution makes
    non-positive starts at a small share of the typical step instead."""
    rows = []
    for f, m in zip(features, measured, strict=True):
        n = len(f)
        byte_sum = sum(x[1] + x[3] for x in f) / n
        flop_sum = sum(x[0] + x[2] for x in f) / n
        rows.append(([1.0 / m, byte_sum / m, flop_sum / m], 1.0))
    solution = _least_squares(rows, 3)
    typical_s = sorted(measured)[len(measured) // 2]
    typical = [
        typical_s,
        typical_s / max(sum(x[1] + x[3] for x in features[0]) / len(features[0]), 1.0),
        typical_s / max(max(sum(x[0] + x[2] for x in f) / len(f) for f in features), 1.0),
    ]
    return [
        math.log(value if value > 1e-3 * guess else 1e-2 * guess)
        for value, guess in zip(solution, typical, strict=True)
    ]


def _least_squares(rows: Sequence[tuple[list[float], float]], k: int) -> list[float]:
    ata = [[sum(r[i] * r[j] for r, _ in rows) for j in range(k)] for i in range(k)]
    atb = [sum(r[i] * b for r, b in rows) for i in range(k)]
    return _solve(ata, atb)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting and a tiny ridge, for small systems."""
    k = len(b)
    scale = max((abs(a[i][i]) for i in range(k)), default=1.0) or 1.0
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    for i in range(k):
        m[i][i] += 1e-12 * scale
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if m[col][col] == 0.0:
            continue
        for row in range(k):
            if row != col:
                factor = m[row][col] / m[col][col]
                for j in range(col, k + 1):
                    m[row][j] -= factor * m[col][j]
    return [m[i][k] / m[i][i] if m[i][i] != 0.0 else 0.0 for i in range(k)]


def _jacobian(
    u: Sequence[float], features: Sequence[Features], measured: Sequence[float]
) -> list[list[float]]:
    h = 1e-6
    columns = []
    for j in range(len(u)):
        up = list(u)
        down = list(u)
        up[j] += h
        down[j] -= h
        r_up = _relative_errors(up, features, measured)
        r_down = _relative_errors(down, features, measured)
        columns.append([(a - b) / (2 * h) for a, b in zip(r_up, r_down, strict=True)])
    return [list(row) for row in zip(*columns, strict=True)]


def _levenberg_marquardt(
    u: list[float], features: Sequence[Features], measured: Sequence[float]
) -> list[float]:
    damping = 1e-3
    sse = _sse(u, features, measured)
    for _ in range(_MAX_ITERATIONS):
        r = _relative_errors(u, features, measured)
        jac = _jacobian(u, features, measured)
        k = len(u)
        jtj = [[sum(row[i] * row[j] for row in jac) for j in range(k)] for i in range(k)]
        jtr = [sum(row[i] * ri for row, ri in zip(jac, r, strict=True)) for i in range(k)]
        improved = False
        while damping < 1e12:
            a = [
                [jtj[i][j] + (damping * (jtj[i][i] + 1e-12) if i == j else 0.0) for j in range(k)]
                for i in range(k)
            ]
            delta = _solve(a, [-x for x in jtr])
            # A trust region in log space: no step multiplies a rate by more than e**3.
            candidate = [
                min(max(x + max(min(d, 3.0), -3.0), -120.0), 10.0)
                for x, d in zip(u, delta, strict=True)
            ]
            candidate[3] = min(candidate[3], math.log(_MAX_P - 1.0))
            new_sse = _sse(candidate, features, measured)
            if new_sse < sse:
                converged = sse - new_sse < 1e-14 * max(sse, 1e-30) + 1e-30
                u, sse, damping = candidate, new_sse, max(damping / 10, 1e-12)
                improved = True
                if converged:
                    return u
                break
            damping *= 10
        if not improved:
            return u
    return u


def _uncertainty(
    u: Sequence[float], features: Sequence[Features], measured: Sequence[float], sse: float
) -> tuple[float, float, float, float]:
    jac = _jacobian(u, features, measured)
    n, k = len(measured), len(u)
    s2 = sse / max(n - k, 1)
    jtj = [[sum(row[i] * row[j] for row in jac) for j in range(k)] for i in range(k)]
    out = []
    for i in range(k):
        unit = [1.0 if j == i else 0.0 for j in range(k)]
        column = _solve([list(r) for r in jtj], unit)
        variance = s2 * column[i]
        # A direction the data does not move (its Jacobian column near zero) is undetermined.
        determined = jtj[i][i] > 1e-9 and variance >= 0 and math.isfinite(variance)
        out.append(math.sqrt(variance) if determined else math.inf)
    return out[0], out[1], out[2], out[3]
