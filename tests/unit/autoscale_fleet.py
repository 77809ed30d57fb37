"""A toy fleet for driving decide() through recorded load series in virtual time.

Load is in units of one replica's capacity: at utilization u = load / ready, each ready pod
runs min(u, 1) * 32 requests, queues 10 * (u - 1) when over capacity, and its P99 ITL is
10 ms + 30 ms * u, read through vLLM's ITL buckets (the estimate and its bucket edge). New pods
become ready `startup_s` after they are asked for. Not a performance model: just monotone
enough that the decisions have something to react to.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from _steps import LinearStep

from tokenpilot.core.autoscale import (
    AutoscalePolicy,
    Decision,
    Evidence,
    History,
    LatencyQuantile,
    Mode,
    Observation,
    decide,
)
from tokenpilot.core.autoscale.capacity import ReplicaModel
from tokenpilot.core.autoscale.demand import LoadPoint
from tokenpilot.core.histogram import bucket_upper_bound
from tokenpilot.core.vllm_metrics import TOKEN_LATENCY_BUCKETS_S

ITL_SLO_S = 0.05
TTFT_SLO_S = 2.0
# A service with both SLOs; the TTFT's sits inside vLLM's 1.0-2.5 s bucket.
TTFT_POLICY = AutoscalePolicy(
    min_replicas=1,
    max_replicas=64,
    itl_p99_slo_s=ITL_SLO_S,
    ttft_p99_slo_s=TTFT_SLO_S,
    scale_down_stabilization_s=60.0,
)
# A replica the capacity model prices with a linear step (5 ms plus 30 us per token), for
# TTFT_POLICY's SLOs.
TTFT_REPLICA_MODEL = ReplicaModel(
    LinearStep(0.005, 30e-6, 30e-6), 512, 64, 100_000, itl_slo_s=ITL_SLO_S, ttft_slo_s=TTFT_SLO_S
)

# A step of 5 ms plus 30 us per token at a 2,048-token budget: enough of an engine for the
# capacity model at a 50 ms ITL and a 2 s TTFT, and the policy that scales on it.
LINEAR_REPLICA_MODEL = ReplicaModel(
    LinearStep(0.005, 30e-6, 30e-6), 2048, 256, 1_000_000, itl_slo_s=0.05, ttft_slo_s=2.0
)
LINEAR_POLICY = AutoscalePolicy(
    min_replicas=1,
    max_replicas=64,
    itl_p99_slo_s=0.05,
    ttft_p99_slo_s=2.0,
    replica_model=LINEAR_REPLICA_MODEL,
)


def itl_quantile(p99_s: float, num_observations: float = 1000.0) -> LatencyQuantile:
    return LatencyQuantile(
        p99_s=p99_s,
        num_observations=num_observations,
        upper_bound_s=bucket_upper_bound(TOKEN_LATENCY_BUCKETS_S, p99_s),
    )


def light_load(at_s: float, ready: int = 12) -> Observation:
    """`ready` pods, all scraped, running 3 requests with nothing waiting, well inside both
    SLOs: a fleet whose size only the capacity model has a word on."""
    return Observation(
        observed_at_s=at_s,
        spec_replicas=ready,
        ready_replicas=ready,
        num_pods_expected=ready,
        num_pods_scraped=ready,
        num_requests_waiting=0.0,
        num_requests_running=3.0,
        itl=itl_quantile(0.012),
        ttft=LatencyQuantile(0.3, 100.0, 0.5, 0.25),
        window_s=30.0,
    )


def prompt_rate_points(
    prompt_tokens_per_s: list[float], interval_s: float = 5.0
) -> list[LoadPoint]:
    """One forecast point per interval at the given prompt rates, one request per 1,000
    tokens, 100 output tokens each interval."""
    return [
        LoadPoint(
            (index + 1) * interval_s,
            interval_s,
            prompt_tokens=rate * interval_s,
            output_tokens=100.0,
            requests=max(1.0, rate * interval_s / 1_000.0),
        )
        for index, rate in enumerate(prompt_tokens_per_s)
    ]


def observe(
    load: float, ready: int, desired: int, at_s: float, *, num_pods_scraped: int | None = None
) -> Observation:
    scraped = ready if num_pods_scraped is None else num_pods_scraped
    u = load / max(ready, 1)
    waiting = scraped * max(0.0, u - 1.0) * 10.0
    running = scraped * min(u, 1.0) * 32.0
    return Observation(
        observed_at_s=at_s,
        spec_replicas=desired,
        ready_replicas=ready,
        num_pods_expected=ready,
        num_pods_scraped=scraped,
        num_requests_waiting=waiting,
        num_requests_running=running,
        itl=itl_quantile(0.010 + 0.030 * u, 1000.0 if load > 0 else 0.0),
        ttft=None,
        kv_cache_usage=min(1.0, 0.8 * u),
        window_s=30.0,
    )


@dataclass
class Tick:
    t_s: float
    load: float
    ready: int
    decision: Decision


@dataclass
class Fleet:
    replicas: int
    startup_s: float = 20.0
    ready_at_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ready_at_s = [-math.inf] * self.replicas

    def ready(self, t_s: float) -> int:
        return sum(1 for ready_at in self.ready_at_s if ready_at <= t_s)

    def scale(self, replicas: int, t_s: float) -> None:
        if replicas > len(self.ready_at_s):
            self.ready_at_s += [t_s + self.startup_s] * (replicas - len(self.ready_at_s))
        else:
            # Starting pods go first, as a ReplicaSet deletes not-ready pods before ready ones.
            self.ready_at_s = sorted(self.ready_at_s)[:replicas]
        self.replicas = replicas


def drive(
    policy: AutoscalePolicy,
    load_at: Callable[[float], float],
    *,
    duration_s: float,
    replicas: int = 1,
    interval_s: float = 5.0,
    startup_s: float = 20.0,
    noise: float = 0.0,
    seed: int = 0,
    tamper: Callable[[float, Observation], Observation] | None = None,
) -> list[Tick]:
    """Evaluate every `interval_s` like the operator does, applying each decision."""
    rng = random.Random(seed)
    fleet = Fleet(replicas, startup_s)
    history = History()
    ticks = []
    t_s = 0.0
    while t_s <= duration_s:
        load = load_at(t_s) * (1.0 + rng.uniform(-noise, noise))
        ready = fleet.ready(t_s)
        observation = observe(load, ready, fleet.replicas, t_s)
        if tamper is not None:
            observation = tamper(t_s, observation)
        decision = decide(policy, history, Evidence(observation), t_s)
        history = decision.history
        fleet.scale(decision.desired_replicas, t_s)
        ticks.append(Tick(t_s, load, ready, decision))
        t_s += interval_s
    return ticks


def direction_changes(ticks: list[Tick]) -> list[float]:
    """Times at which a move went the other way from the previous move."""
    changes = []
    last = None
    for tick in ticks:
        mode = tick.decision.mode
        direction = (
            "up"
            if mode in (Mode.scale_up, Mode.panic)
            else "down"
            if mode is Mode.scale_down
            else None
        )
        if direction is None:
            continue
        if last is not None and direction != last:
            changes.append(tick.t_s)
        last = direction
    return changes


def replay_steady(
    policy: AutoscalePolicy, observation: Observation, *, until_s: float, interval_s: float = 5.0
) -> list[Decision]:
    """The same readings every interval from 0 to `until_s`, on a fleet that follows each
    decision at once (every replica asked for is ready and read): the decisions."""
    history = History()
    replicas = observation.spec_replicas
    decisions = []
    at_s = 0.0
    while at_s <= until_s:
        current = replace(
            observation,
            observed_at_s=at_s,
            spec_replicas=replicas,
            ready_replicas=replicas,
            num_pods_expected=replicas,
            num_pods_scraped=replicas,
        )
        decision = decide(policy, history, Evidence(current), at_s)
        history, replicas = decision.history, decision.desired_replicas
        decisions.append(decision)
        at_s += interval_s
    return decisions
