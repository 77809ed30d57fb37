"""The balancer in front of the replicas: a Service's random choice per connection, repeatable
from its seed, or least-request; either way only Ready replicas that are not draining get
requests."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from _steps import LinearStep

from tokenpilot.api.llmservice import MetricsSourceType
from tokenpilot_lab.fleet import DEFAULT_BALANCER, Balancer, FleetConfig, FleetView, simulate
from tokenpilot_lab.fleet.policies import ScaleChoice
from tokenpilot_lab.sim import EngineConfig
from tokenpilot_lab.workload import Trace, TraceRequest

TIMER = LinearStep()
ENGINE = EngineConfig(num_kv_blocks=20_000, max_num_batched_tokens=2048, max_num_seqs=256)
# One short request a second, half-way between the policy's looks: each is done long before
# the next, so every replica is idle when a request arrives.
TRICKLE = Trace("trickle", tuple(TraceRequest(0.5 + i, 16, 2) for i in range(400)), 402.0)


@dataclass
class Scripted:
    """Asks for `plan[t]` replicas from time t on, and keeps every view of the pods."""

    plan: dict[float, int] = field(default_factory=dict)
    name: str = "scripted"
    interval_s: float = 5.0
    source: MetricsSourceType = MetricsSourceType.direct
    views: list[FleetView] = field(default_factory=list)

    def decide(self, view: FleetView) -> ScaleChoice:
        self.views.append(view)
        wanted = [n for t, n in sorted(self.plan.items()) if t <= view.now_s]
        return ScaleChoice(wanted[-1] if wanted else view.spec_replicas, "scripted")

    def served(self, at_s: float = float("inf")) -> dict[str, int]:
        """Requests each Ready pod had finished by the last view at or before `at_s`."""
        view = [v for v in self.views if v.now_s <= at_s][-1]
        return {name: int(pod.requests_total or 0) for name, pod in view.pods.items()}


def spread(balancer: Balancer, seed: int = 0) -> dict[str, int]:
    policy = Scripted()
    fleet = FleetConfig(initial_replicas=4, max_replicas=4, balancer=balancer, balancer_seed=seed)
    result = simulate(TRICKLE, policy, fleet, ENGINE, TIMER)
    assert result.num_met == TRICKLE.num_requests
    return policy.served()


def test_a_service_is_the_default() -> None:
    assert DEFAULT_BALANCER is Balancer.service
    assert FleetConfig().balancer is Balancer.service


def test_a_service_spreads_requests_at_random() -> None:
    served = spread(Balancer.service)
    assert sum(served.values()) == TRICKLE.num_requests
    # 400 requests over 4 replicas at random: each gets about 100 (binomial sd 8.7).
    assert all(60 <= n <= 140 for n in served.values()), served


def test_a_service_repeats_its_choices_with_the_seed() -> None:
    assert spread(Balancer.service, seed=3) == spread(Balancer.service, seed=3)
    assert spread(Balancer.service, seed=3) != spread(Balancer.service, seed=4)


def test_least_request_sends_each_request_to_the_fewest_in_flight_ties_to_the_oldest() -> None:
    # Every replica is idle at each arrival: the oldest takes them all, whatever the seed.
    for seed in (0, 1):
        served = spread(Balancer.least_request, seed)
        assert served == {"replica-0": 400, "replica-1": 0, "replica-2": 0, "replica-3": 0}
    # Requests that overlap are spread over the replicas with the fewest in flight.
    long = Trace("long", tuple(TraceRequest(1.0 + i * 0.1, 16, 2000) for i in range(8)), 300.0)
    policy = Scripted()
    fleet = FleetConfig(initial_replicas=4, max_replicas=4, balancer=Balancer.least_request)
    simulate(long, policy, fleet, ENGINE, TIMER)
    assert set(policy.served().values()) == {2}


@pytest.mark.parametrize("balancer", list(Balancer))
def test_only_ready_replicas_that_are_not_draining_get_requests(balancer: Balancer) -> None:
    # Three more replicas asked for at 50 s are Ready at 110 s; three removed at 250 s drain.
    policy = Scripted({50.0: 4, 250.0: 1})
    fleet = FleetConfig(initial_replicas=1, max_replicas=4, cold_start_s=60.0, balancer=balancer)
    result = simulate(TRICKLE, policy, fleet, ENGINE, TIMER)
    assert result.num_met == TRICKLE.num_requests
    # Until 110 s only replica-0 is Ready: it served every request that arrived by then, and
    # the starting replicas are not even scraped.
    assert policy.served(at_s=105.0) == {"replica-0": 105}
    assert policy.served(at_s=110.0) == {
        "replica-0": 110,
        "replica-1": 0,
        "replica-2": 0,
        "replica-3": 0,
    }
    at_removal = policy.served(at_s=250.0)
    if balancer is Balancer.service:
        assert all(n > 0 for name, n in at_removal.items() if name != "replica-0")
    # From 250 s the one replica kept (the oldest) takes every arrival; the others are gone.
    last = policy.served()
    assert set(last) == {"replica-0"}
    arrived_after = sum(1 for r in TRICKLE.requests if r.arrival_s > 250.0)
    assert last["replica-0"] - at_removal["replica-0"] == arrived_after
