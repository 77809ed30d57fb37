"""Sizing a static fleet for a trace's peak, and the per-replica load it carries there.

The peak is the window (default 5 min) with the most prompt plus output tokens. The fewest
replicas whose fixed fleet meets the attainment goal on that window are found by doubling and
then bisection (attainment does not fall as replicas are added: the balancer only spreads load
thinner).

The HPA and KPA baselines need a target in running requests per replica: what one replica
carries while still meeting the SLOs. It is measured, not guessed: the peak window is replayed
on one replica at rising rates (doubling, then bisection on the rate factor) and the target is
the mean running requests at the fastest rate that still meets the attainment goal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tokenpilot_lab.fleet.config import FleetConfig
from tokenpilot_lab.fleet.policies.static import StaticPolicy
from tokenpilot_lab.fleet.results import FleetResult
from tokenpilot_lab.fleet.simulator import simulate
from tokenpilot_lab.sim import EngineConfig, StepTimer
from tokenpilot_lab.workload import Trace, scale_rate, window

MAX_RATE_FACTOR = 64.0
MIN_RATE_FACTOR = 1.0 / 64
NUM_BISECTIONS = 5

DEFAULT_PEAK_WINDOW_S = 300.0
DEFAULT_MIN_ATTAINMENT = 0.99

# Where the baselines' per-replica targets came from, in the words the table prints.
BUSIEST_BASIS = "one replica's load at the fastest replay of the busiest 5 min meeting 99 %"
STEADY_BASIS = (
    "one replica's load at the fastest steady load test meeting 99 %, the busiest 5 min's "
    "requests at a constant rate"
)
FIXED_BASIS = "set by the caller, not measured"


@dataclass(frozen=True, slots=True)
class Capacity:
    """One replica at the fastest replay of the peak window that still meets the goal: the
    requests it then runs, and has in flight (running + waiting), on average."""

    running_per_replica: float
    in_flight_per_replica: float


@dataclass(frozen=True, slots=True)
class Sizing:
    replicas: int
    target_running_per_replica: float
    peak_start_s: float
    peak_window_s: float
    peak_attainment: float
    reason: str
    target_in_flight_per_replica: float = 1.0
    # The same measurement on the tuned budget, for the `+tuned` baselines, and the tuned
    # budget's own sizing where a static fleet runs it (`static-peak+tuned`).
    tuned_capacity: Capacity | None = None
    tuned_static: Sizing | None = None
    target_basis: str = BUSIEST_BASIS


def size_for_peak(
    trace: Trace,
    fleet: FleetConfig,
    engine_config: EngineConfig,
    timer: StepTimer,
    *,
    peak_window_s: float = DEFAULT_PEAK_WINDOW_S,
    min_attainment: float = DEFAULT_MIN_ATTAINMENT,
    opening: Sizing | None = None,
) -> Sizing:
    """The static fleet for the hardest of two windows: the busiest by tokens, and the first
    (a trace may open on a burst the token count does not single out). `opening` is
    `size_for_opening`'s answer for the same settings, where the caller already has it."""
    busiest = _size_window(
        trace,
        trace.peak_window_start_s(peak_window_s),
        peak_window_s,
        "busiest",
        fleet,
        engine_config,
        timer,
        min_attainment,
    )
    if opening is None:
        opening = size_for_opening(
            trace,
            fleet,
            engine_config,
            timer,
            window_s=peak_window_s,
            min_attainment=min_attainment,
        )
    if opening.replicas > busiest.replicas:
        return replace(
            opening,
            target_running_per_replica=busiest.target_running_per_replica,
            target_in_flight_per_replica=busiest.target_in_flight_per_replica,
        )
    return busiest


def size_for_opening(
    trace: Trace,
    fleet: FleetConfig,
    engine_config: EngineConfig,
    timer: StepTimer,
    *,
    window_s: float = DEFAULT_PEAK_WINDOW_S,
    min_attainment: float = DEFAULT_MIN_ATTAINMENT,
) -> Sizing:
    """The fleet the first `window_s` needs: where autoscalers start, as if the trace were cut
    from a longer day whose fleet had already adapted to the load."""
    return _size_window(trace, 0.0, window_s, "first", fleet, engine_config, timer, min_attainment)


def fewest_meeting(
    meets: Callable[[int], bool], lowest: int, highest: int, first: int | None = None
) -> int:
    """The fewest replicas in [lowest, highest] for which `meets` holds, by doubling from
    `first` (default `lowest`) and then bisection; `highest` when none does. `meets` must not
    turn false as replicas are added (the balancer only spreads load thinner; behind the
    random `service` balancer that holds on average, not run by run, and the search returns
    a size that meets it where the bisection found one)."""
    # low fails (or is below the range), high is the candidate.
    low, high = lowest - 1, max(lowest, first if first is not None else lowest)
    while not meets(high) and high < highest:
        low, high = high, min(highest, max(high * 2, 1))
    if not meets(high):
        return high
    while high - low > 1:
        mid = (low + high) // 2
        if meets(mid):
            high = mid
        else:
            low = mid
    return high


def _size_window(
    trace: Trace,
    start_s: float,
    window_s: float,
    label: str,
    fleet: FleetConfig,
    engine_config: EngineConfig,
    timer: StepTimer,
    min_attainment: float,
) -> Sizing:
    peak_window_s = window_s
    end_s = min(trace.duration_s, start_s + window_s)
    peak = window(trace, start_s, end_s) if end_s > start_s else trace
    runs: dict[int, FleetResult] = {}

    def run(n: int) -> FleetResult:
        if n not in runs:
            config = replace(fleet, initial_replicas=n)
            runs[n] = simulate(peak, StaticPolicy(n), config, engine_config, timer)
        return runs[n]

    def meets(n: int) -> bool:
        return run(n).servable_attainment >= min_attainment

    high = fewest_meeting(meets, fleet.min_replicas, fleet.max_replicas)
    if meets(high):
        reason = (
            f"{high} replica(s) meet {min_attainment:.0%} on the {label} {peak_window_s:g} s "
            f"(from {start_s:.0f} s)"
        )
    else:
        reason = (
            f"even max_replicas={fleet.max_replicas} reaches only "
            f"{run(high).servable_attainment:.1%} on the {label} {peak_window_s:g} s"
        )
    result = run(high)
    capacity = measure_capacity(peak, fleet, engine_config, timer, min_attainment)
    return Sizing(
        replicas=high,
        target_running_per_replica=capacity.running_per_replica,
        target_in_flight_per_replica=capacity.in_flight_per_replica,
        peak_start_s=start_s,
        peak_window_s=end_s - start_s,
        peak_attainment=result.servable_attainment,
        reason=reason,
    )


def measure_capacity(
    peak: Trace,
    fleet: FleetConfig,
    engine_config: EngineConfig,
    timer: StepTimer,
    min_attainment: float = DEFAULT_MIN_ATTAINMENT,
) -> Capacity:
    """One replica's load at the fastest replay of `peak` that meets the goal (see Capacity)."""
    one = replace(fleet, initial_replicas=1, min_replicas=1, max_replicas=1)

    def run(factor: float) -> FleetResult:
        return simulate(scale_rate(peak, factor), StaticPolicy(1), one, engine_config, timer)

    def mean_running(result: FleetResult) -> tuple[float, float]:
        running = result.timeline.num_running
        waiting = result.timeline.num_waiting
        if not running:
            return 0.0, 0.0
        return sum(running) / len(running), (sum(running) + sum(waiting)) / len(running)

    if not peak.requests:
        return Capacity(1.0, 1.0)
    # Bracket the fastest passing rate: from x1 double up until it fails, or halve down until
    # it passes; then bisect between the two.
    good: float | None = None
    bad: float | None = None
    best = (0.0, 0.0)
    factor = 1.0
    while MIN_RATE_FACTOR <= factor <= MAX_RATE_FACTOR:
        result = run(factor)
        if result.servable_attainment >= min_attainment:
            good, best = factor, mean_running(result)
            if bad is not None:
                break
            factor *= 2
        else:
            bad = factor
            if good is not None:
                break
            factor /= 2
    if bad is not None and good is not None:
        for _ in range(NUM_BISECTIONS):
            mid = (good + bad) / 2
            result = run(mid)
            if result.servable_attainment >= min_attainment:
                good, best = mid, mean_running(result)
            else:
                bad = mid
    return Capacity(max(1.0, round(best[0], 1)), max(1.0, round(best[1], 1)))
