"""The engines' costs the operator learns converge to a hidden truth's, term by term.

The simulated engines run a truth that prices each term of a step on its own (a decode-only
step `decode` times the profile's price, what the prefill chunks add `prefill` times); the
operator's autoscaler, run as `tokenpilot simulate` runs it, sees only the engines' /metrics.
On a steady Poisson load at a fixed fleet, what it learned of each term after ten minutes is
within 10 % of the truth's.
"""

from __future__ import annotations

import argparse

import pytest

from tokenpilot.core.roofline import TermScaledPricer
from tokenpilot_lab.commands.simulate import flags, world
from tokenpilot_lab.fleet.compare import contenders
from tokenpilot_lab.fleet.operator import OperatorPolicy
from tokenpilot_lab.fleet.simulator import simulate

TOLERANCE = 0.10


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    flags.configure(parser)
    return parser.parse_args(
        [
            "--synthetic",
            "poisson",
            "--mean-rps",
            "12",
            "--duration",
            "600",
            "--gpu",
            "H100-80GB",
            "--max-model-len",
            "131072",
            "--min-replicas",
            "2",
            "--max-replicas",
            "2",
            "--initial-replicas",
            "2",
        ]
    )


@pytest.mark.parametrize(("decode", "prefill"), [(1.0, 1.4), (1.3, 1.0), (1.2, 1.6)])
def test_the_learned_terms_converge_to_the_hidden_truth(decode: float, prefill: float) -> None:
    args = _args()
    trace = flags.load_trace(args)
    setup = world.setup(args, trace)
    truth = TermScaledPricer(setup.timer, decode, prefill)
    (entry,), _ = contenders(
        ("tokenpilot",),
        trace,
        setup.fleet,
        tuned_engine=setup.tuned_engine,
        default_engine=setup.default_engine,
        timer=truth,
        model_timer=setup.timer,
        services=setup.services,
    )
    policy = entry.make_policy()
    assert isinstance(policy, OperatorPolicy)
    simulate(trace, policy, entry.fleet, entry.engine_config, truth)

    costs = policy.state.pace.costs
    assert costs.decode is not None and costs.prefill is not None
    assert costs.decode.factor == pytest.approx(decode, rel=TOLERANCE)
    assert costs.prefill.factor == pytest.approx(prefill, rel=TOLERANCE)
    assert costs.prefill.certain and costs.decode.readings >= 60
