"""The fleet comparison as a picture: load, replicas per policy, and latency over time.

Three stacked panels sharing the time axis: arrivals per second (from the trace), the replicas
each policy asked for, and each policy's P99 TTFT per minute (by arrival time). Uses
matplotlib's non-interactive Agg backend, so it works without a display.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tokenpilot_lab.fleet import FleetResult
from tokenpilot_lab.fleet.results import nearest_rank
from tokenpilot_lab.workload import Trace

LOAD_BIN_S = 10.0
LATENCY_BIN_S = 60.0


def plot_comparison(trace: Trace, results: Sequence[FleetResult], path: Path) -> None:
    duration_s = max(trace.duration_s, LOAD_BIN_S)
    fig, (load_ax, replicas_ax, latency_ax) = plt.subplots(
        3, 1, figsize=(11, 8), sharex=True, constrained_layout=True
    )
    num_bins = math.ceil(duration_s / LOAD_BIN_S)
    counts = [0] * num_bins
    for request in trace.requests:
        counts[min(num_bins - 1, int(request.arrival_s // LOAD_BIN_S))] += 1
    load_ax.step(
        [i * LOAD_BIN_S / 60 for i in range(num_bins)],
        [c / LOAD_BIN_S for c in counts],
        where="post",
        color="black",
    )
    load_ax.set_ylabel("arrivals / s")
    load_ax.set_title(f"{trace.name}: {trace.num_requests} requests")

    for result in results:
        timeline = result.timeline
        replicas_ax.step(
            [t / 60 for t in timeline.time_s],
            timeline.spec_replicas,
            where="post",
            label=f"{result.policy} ({result.gpu_hours:.2f} GPU-h)",
        )
        minutes, p99s = _ttft_p99_by_minute(trace, result)
        latency_ax.plot(minutes, p99s, marker=".", linewidth=1, label=result.policy)
    replicas_ax.set_ylabel("replicas")
    replicas_ax.legend(fontsize="small", loc="upper left")
    latency_ax.set_ylabel("P99 TTFT per minute (s)")
    latency_ax.set_yscale("log")
    latency_ax.set_xlabel("minutes")
    latency_ax.legend(fontsize="small", loc="upper left")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ttft_p99_by_minute(trace: Trace, result: FleetResult) -> tuple[list[float], list[float]]:
    bins: dict[int, list[float]] = {}
    for request, ttft_s in zip(trace.requests, result.ttft_s, strict=True):
        if not math.isnan(ttft_s):
            bins.setdefault(int(request.arrival_s // LATENCY_BIN_S), []).append(ttft_s)
    minutes = sorted(bins)
    return (
        [m * LATENCY_BIN_S / 60 for m in minutes],
        [nearest_rank(sorted(bins[m]), 0.99) for m in minutes],
    )
