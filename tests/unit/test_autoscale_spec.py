"""An LLMService spec becomes the policy decide() runs with; bad durations name their field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tokenpilot.api.llmservice import LLMServiceSpec, SloSpec
from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.spec import evaluation_interval_s, policy_from_spec
from tokenpilot.core.errors import InvalidSpec


def spec(autoscaling: dict[str, Any] | None = None, slo: dict[str, Any] | None = None):
    return LLMServiceSpec.model_validate(
        {
            "model": {"name": "m", "source": "hf://org/m", "shape": {"preset": "llama-3.1-8b"}},
            "slo": slo or {},
            "autoscaling": {"enabled": True, **(autoscaling or {})},
        }
    )


@pytest.mark.parametrize(
    ("autoscaling", "slo", "expected"),
    [
        (
            {},
            {},
            AutoscalePolicy(min_replicas=1, max_replicas=4, scale_down_stabilization_s=300),
        ),
        (
            {"minReplicas": 2, "maxReplicas": 9, "targetQueueDepthPerReplica": 6},
            {"itlP99": "50ms", "ttftP99": "1.5s"},
            AutoscalePolicy(
                min_replicas=2,
                max_replicas=9,
                target_queue_per_replica=6,
                itl_p99_slo_s=0.05,
                ttft_p99_slo_s=1.5,
            ),
        ),
        (
            # a short window shortens the step interval; a slow interval ages observations slower
            {"scaleDownStabilization": "20s", "scaleUpStabilization": "10s", "interval": "10s"},
            {},
            AutoscalePolicy(
                scale_down_stabilization_s=20,
                scale_down_step_interval_s=20,
                scale_up_stabilization_s=10,
                max_observation_age_s=30,
            ),
        ),
    ],
)
def test_policy_from_spec(autoscaling, slo, expected):
    assert policy_from_spec(spec(autoscaling, slo)) == expected


def test_interval():
    assert evaluation_interval_s(spec()) == 5.0
    assert evaluation_interval_s(spec({"interval": "1m"})) == 60.0


def test_a_bad_duration_names_the_field():
    # The API refuses an SLO of zero (tokenpilot.api.units), naming the field; a spec built
    # past the API still cannot give the policy one.
    with pytest.raises(ValidationError, match=r"slo\.itlP99"):
        spec(slo={"itlP99": "0ms"})
    unchecked = spec().model_copy(update={"slo": SloSpec.model_construct(itl_p99="0ms")})
    with pytest.raises(InvalidSpec, match=r"slo\.itlP99"):
        policy_from_spec(unchecked)
