"""What a new user installs works as documented: the chart's kubeVersion admits only clusters that
run what it renders, and every Secret a sample needs is explained where the sample is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from _llms import CLUSTER, by_name, by_product

from tokenpilot.api.crd import crd
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.render_plan import plan

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "samples").glob("*.yaml"))
# The Kubernetes release each feature we render became usable without a feature gate, with the
# Kubernetes documentation page that says so.
FEATURES = {
    # KEP-3960 PodLifecycleSleepAction: alpha in 1.29, beta and on by default in 1.30
    "lifecycle.preStop.sleep": (1, 30),
    # KEP-2876 CRD validation rules, messageExpression included: GA in 1.29
    "x-kubernetes-validations messageExpression": (1, 29),
}


def _minimum(constraint: str) -> tuple[int, int]:
    match = re.search(r">=\s*v?(\d+)\.(\d+)", constraint)
    assert match, f"kubeVersion {constraint!r} has no lower bound"
    return int(match[1]), int(match[2])


def _rendered_deployment() -> dict[str, Any]:
    body = yaml.safe_load(SAMPLES[0].read_text())
    body["metadata"].setdefault("namespace", "default")
    service = LLMService.model_validate(body)
    planned = plan(
        service, nodes=CLUSTER, by_name=by_name, by_product=by_product, service_monitor_served=True
    )
    return next(m for m in planned.manifests if m["kind"] == "Deployment")


def _features_used() -> set[str]:
    used = set()
    (container,) = _rendered_deployment()["spec"]["template"]["spec"]["containers"]
    if "sleep" in container.get("lifecycle", {}).get("preStop", {}):
        used.add("lifecycle.preStop.sleep")
    if "messageExpression" in yaml.safe_dump(crd()):
        used.add("x-kubernetes-validations messageExpression")
    return used


def test_the_charts_kube_version_admits_only_clusters_that_run_what_it_renders() -> None:
    chart = yaml.safe_load((REPO / "helm" / "tokenpilot" / "Chart.yaml").read_text())
    needed = max(FEATURES[f] for f in _features_used())
    assert _minimum(chart["kubeVersion"]) >= needed, (chart["kubeVersion"], needed)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_a_sample_that_needs_a_secret_says_how_to_create_it(path: Path) -> None:
    text = path.read_text()
    secret = (yaml.safe_load(text)["spec"]["model"].get("hubTokenSecret") or {}).get("name")
    if secret is None:
        return
    assert f"kubectl create secret generic {secret}" in text


def test_the_readme_creates_the_secret_before_applying_a_sample() -> None:
    readme = (REPO / "README.md").read_text()
    create = readme.find("kubectl create secret generic hf-token")
    apply = readme.find("kubectl apply -f samples/")
    assert create != -1 and apply != -1 and create < apply
