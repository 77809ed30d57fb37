"""status.engineCosts as the API server accepts it: a term no reading bounds yet is left out.

One reading bounds nothing (an infinite uncertainty); JSON has no infinity, and pydantic's JSON
mode writes it as a string, which the API server refuses for a number field, and with it the
whole status apply (the decision, the conditions) of that evaluation."""

from __future__ import annotations

import math

from tokenpilot.core.autoscale.costs import EngineCosts, TermEstimate
from tokenpilot.core.autoscale.report import costs_status


def test_a_cost_term_no_reading_bounds_yet_is_left_out_of_status() -> None:
    costs = EngineCosts(decode=TermEstimate(1.1, 0.02, 40), prefill=TermEstimate(2.5, math.inf, 1))
    shown = costs_status(costs, 50.0).model_dump(by_alias=True, mode="json", exclude_none=True)
    assert "prefill" not in shown
    assert shown["decodeStep"] == {"factor": 1.1, "uncertainty": 0.02, "readings": 40}
