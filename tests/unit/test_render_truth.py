"""What the rendered Deployment does for a truthful status: a progress deadline no model load
outlasts, and a crash's last log lines kept as the container's termination message."""

from __future__ import annotations

import pytest
from _llms import by_name, service

from tokenpilot.api.model_shape import MODEL_PRESETS
from tokenpilot.core.batching import spec_decision
from tokenpilot.core.render import RenderFacts, model_load_budget_s, render


@pytest.mark.parametrize("preset", sorted(MODEL_PRESETS))
def test_the_progress_deadline_outlasts_the_startup_probe(preset: str) -> None:
    svc = service(model__shape={"preset": preset})
    shape = MODEL_PRESETS[preset]
    facts = RenderFacts(
        sku_name="H100-80GB",
        gpu_product_labels=tuple(by_name("H100-80GB").gpu_product_labels),
        batching=spec_decision(2048, 64),
        model_load_budget_s=model_load_budget_s(shape.weight_bytes, 1),
    )
    deployment = next(m for m in render(svc, facts) if m["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    startup = container["startupProbe"]
    window_s = startup["periodSeconds"] * startup["failureThreshold"]
    assert window_s >= facts.model_load_budget_s
    assert deployment["spec"]["progressDeadlineSeconds"] > window_s
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
