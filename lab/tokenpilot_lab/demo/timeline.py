"""The demo's PNG timeline: replicas, queue and P99 ITL on one time axis, phases shaded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenpilot_lab.demo.observe import Sample
from tokenpilot_lab.demo.summary import FIRST_SCALE_UP_BOUND_S, Milestones, steps
from tokenpilot_lab.loadgen import LoadPlan

PHASE_COLOURS = {"quiet": "#e8f4e8", "burst": "#fbe3d6", "cool-down": "#e3ecf7"}


def write_png(
    path: Path,
    *,
    samples: Sequence[Sample],
    client_itl_p99_s: Sequence[tuple[float, float]],
    plan: LoadPlan,
    milestones: Milestones,
    slo_s: float,
    bounds: tuple[int, int],
    target_queue_per_replica: float,
    title: str,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end_s = max((s.t_s for s in samples), default=plan.duration_s)
    t = [s.t_s for s in samples]
    fig, (ax_r, ax_q, ax_l) = plt.subplots(3, 1, sharex=True, figsize=(11, 8.5), dpi=110)
    fig.suptitle(title, fontsize=11)

    start_s = 0.0
    for phase in plan.phases:
        stop_s = min(start_s + phase.duration_s, end_s)
        for ax in (ax_r, ax_q, ax_l):
            ax.axvspan(start_s, stop_s, color=PHASE_COLOURS.get(phase.name, "#eeeeee"), lw=0)
        ax_r.text(
            (start_s + stop_s) / 2, bounds[1] + 0.55, f"{phase.name} ({phase.rate_per_s:g}/s)",
            ha="center", va="center", fontsize=9,
        )  # fmt: skip
        start_s += phase.duration_s

    ax_r.step(t, [s.desired_replicas for s in samples], where="post", lw=2, label="desired")
    ax_r.step(t, [s.ready_replicas for s in samples], where="post", lw=2, ls="--", label="ready")
    ax_r.axhline(bounds[0], color="grey", lw=0.8, ls=":")
    ax_r.axhline(bounds[1], color="grey", lw=0.8, ls=":")
    ax_r.set_ylim(0, bounds[1] + 1)
    ax_r.set_ylabel("replicas")
    burst_s = plan.phase_start_s("burst")
    if milestones.first_scale_up_s is not None:
        at = burst_s + milestones.first_scale_up_s
        ax_r.axvline(at, color="tab:red", lw=1)
        ax_r.annotate(
            f"scale-up +{milestones.first_scale_up_s:.0f} s (bound {FIRST_SCALE_UP_BOUND_S:g} s)",
            (at, 0.3), xytext=(4, 0),
            textcoords="offset points", fontsize=8, color="tab:red",
        )  # fmt: skip
    if milestones.new_pods_ready_s is not None:
        at = burst_s + milestones.new_pods_ready_s
        ax_r.axvline(at, color="tab:green", lw=1)
        ax_r.annotate(
            f"new pods Ready +{milestones.new_pods_ready_s:.0f} s", (at, 0.8), xytext=(4, 0),
            textcoords="offset points", fontsize=8, color="tab:green",
        )  # fmt: skip
    # Every change of the desired replicas, with the reason code of the decision that made it.
    for step in steps(samples):
        ax_r.annotate(
            step.code or "?", (step.t_s, step.after), xytext=(3, 4),
            textcoords="offset points", fontsize=7, rotation=30, color="tab:blue",
        )  # fmt: skip
    ax_r.legend(loc="upper right", fontsize=8)

    ax_q.plot(t, [s.num_waiting for s in samples], lw=1.5, label="waiting (queue)")
    ax_q.plot(t, [s.num_running for s in samples], lw=1, alpha=0.7, label="running")
    ax_q.plot(
        t, [target_queue_per_replica * max(1, s.ready_replicas) for s in samples],
        color="grey", lw=0.8, ls=":", label="queue target x ready",
    )  # fmt: skip
    ax_q.set_ylabel("requests")
    ax_q.legend(loc="upper right", fontsize=8)

    ax_l.plot(
        t, [None if s.itl_p99_s is None else s.itl_p99_s * 1000 for s in samples],
        lw=1.5, label="engines' P99 ITL (10 s window)",
    )  # fmt: skip
    if client_itl_p99_s:
        ax_l.plot(
            [x for x, _ in client_itl_p99_s], [y * 1000 for _, y in client_itl_p99_s],
            lw=1, alpha=0.8, marker=".", label="client-measured P99 ITL (5 s bins)",
        )  # fmt: skip
    ax_l.axhline(slo_s * 1000, color="tab:red", lw=1, ls="--", label=f"SLO {slo_s * 1000:g} ms")
    ax_l.set_ylabel("ms (engine time)")
    ax_l.set_xlabel("seconds since the load started")
    ax_l.set_ylim(bottom=0)
    ax_l.legend(loc="upper right", fontsize=8)
    ax_l.set_xlim(0, end_s)

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
