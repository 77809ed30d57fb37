"""Every sample parses with the API types and renders against a cluster that has its GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from _llms import CLUSTER, by_name, by_product

from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.render_plan import plan

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "samples").glob("*.yaml"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_renders(path: Path) -> None:
    body = yaml.safe_load(path.read_text())
    body["metadata"].setdefault("namespace", "default")
    service = LLMService.model_validate(body)
    planned = plan(
        service, nodes=CLUSTER, by_name=by_name, by_product=by_product, service_monitor_served=True
    )
    assert next(m["kind"] for m in planned.manifests) == "Deployment"


def test_there_are_h100_and_l40s_samples() -> None:
    names = {p.name for p in SAMPLES}
    assert any("h100" in n for n in names) and any("l40s" in n for n in names)
