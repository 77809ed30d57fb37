"""Synthetic traces from a seed: Poisson, periodic bursts and a diurnal cycle.

Arrivals of a non-homogeneous Poisson process are drawn by thinning (Lewis and Shedler, 1979):
candidates at the peak rate, each kept with probability rate(t) / peak. Token counts are
log-normal around the given medians (clamped to at least one token), a common fit for chat and
code traffic. The same seed always gives the same trace.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from tokenpilot_lab.workload.trace import Trace, TraceError, TraceRequest


def poisson(
    rate_rps: float,
    duration_s: float,
    *,
    seed: int,
    median_prompt_tokens: int = 1024,
    median_output_tokens: int = 128,
    sigma: float = 0.8,
) -> Trace:
    """Arrivals at a constant rate."""
    return _generate(
        f"poisson({rate_rps:g} rps, {duration_s:g} s, seed {seed})",
        lambda _t: rate_rps,
        rate_rps,
        duration_s,
        seed,
        median_prompt_tokens,
        median_output_tokens,
        sigma,
    )


def bursts(
    base_rps: float,
    burst_rps: float,
    duration_s: float,
    *,
    seed: int,
    burst_every_s: float = 300.0,
    burst_length_s: float = 30.0,
    median_prompt_tokens: int = 1024,
    median_output_tokens: int = 128,
    sigma: float = 0.8,
) -> Trace:
    """`base_rps`, rising to `burst_rps` for `burst_length_s` at the start of every period."""
    if burst_every_s <= 0 or burst_length_s < 0:
        raise TraceError("burst_every_s must be > 0 and burst_length_s >= 0")

    def rate(t: float) -> float:
        return burst_rps if (t % burst_every_s) < burst_length_s else base_rps

    return _generate(
        f"bursts({base_rps:g}->{burst_rps:g} rps, seed {seed})",
        rate,
        max(base_rps, burst_rps),
        duration_s,
        seed,
        median_prompt_tokens,
        median_output_tokens,
        sigma,
    )


def diurnal(
    mean_rps: float,
    duration_s: float,
    *,
    seed: int,
    peak_to_trough: float = 4.0,
    period_s: float = 86_400.0,
    median_prompt_tokens: int = 1024,
    median_output_tokens: int = 128,
    sigma: float = 0.8,
) -> Trace:
    """A sinusoid around `mean_rps` whose peak is `peak_to_trough` times its trough."""
    if peak_to_trough < 1 or period_s <= 0:
        raise TraceError("peak_to_trough must be >= 1 and period_s > 0")
    amplitude = mean_rps * (peak_to_trough - 1) / (peak_to_trough + 1)

    def rate(t: float) -> float:
        # Starts at the trough so a short run sees the ramp up.
        return mean_rps - amplitude * math.cos(2 * math.pi * t / period_s)

    return _generate(
        f"diurnal({mean_rps:g} rps x{peak_to_trough:g}, seed {seed})",
        rate,
        mean_rps + amplitude,
        duration_s,
        seed,
        median_prompt_tokens,
        median_output_tokens,
        sigma,
    )


def _generate(
    name: str,
    rate: Callable[[float], float],
    peak_rps: float,
    duration_s: float,
    seed: int,
    median_prompt_tokens: int,
    median_output_tokens: int,
    sigma: float,
) -> Trace:
    if duration_s < 0 or peak_rps < 0:
        raise TraceError(f"{name}: rate and duration must be >= 0")
    if median_prompt_tokens < 1 or median_output_tokens < 1 or sigma < 0:
        raise TraceError(f"{name}: median token counts must be >= 1 and sigma >= 0")
    rng = random.Random(seed)
    requests: list[TraceRequest] = []
    t = 0.0
    mu_prompt, mu_output = math.log(median_prompt_tokens), math.log(median_output_tokens)
    while peak_rps > 0:
        t += rng.expovariate(peak_rps)
        if t >= duration_s:
            break
        if rng.random() * peak_rps > rate(t):
            continue
        num_prompt = max(1, round(rng.lognormvariate(mu_prompt, sigma)))
        num_output = max(1, round(rng.lognormvariate(mu_output, sigma)))
        requests.append(TraceRequest(t, num_prompt, num_output))
    return Trace(name, tuple(requests), duration_s)
