"""Drift is what the renderer set and the live object no longer says; defaults are not drift."""

from __future__ import annotations

import copy

import pytest
from _llms import CLUSTER, by_name, by_product, service

from tokenpilot.core.render_drift import difference
from tokenpilot.core.render_plan import plan

DEPLOYMENT = plan(
    service(), nodes=CLUSTER, by_name=by_name, by_product=by_product, service_monitor_served=False
).manifests[0]


def live_with(edit) -> dict:  # type: ignore[no-untyped-def, type-arg]
    live = copy.deepcopy(DEPLOYMENT)
    # What the API server and controllers add is never drift.
    live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "3"
    live["metadata"]["resourceVersion"] = "42"
    container = live["spec"]["template"]["spec"]["containers"][0]
    container["terminationMessagePath"] = "/dev/termination-log"
    container["readinessProbe"]["httpGet"]["scheme"] = "HTTP"
    container["env"].append({"name": "ADDED_BY_HAND", "value": "1"})
    live["status"] = {"readyReplicas": 1}
    edit(live)
    return live


def test_defaults_and_additions_are_not_drift() -> None:
    assert difference(DEPLOYMENT, live_with(lambda live: None)) is None


def _image(live: dict) -> None:  # type: ignore[type-arg]
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "other:1"


def _args(live: dict) -> None:  # type: ignore[type-arg]
    live["spec"]["template"]["spec"]["containers"][0]["args"].append("--x")


def _replicas(live: dict) -> None:  # type: ignore[type-arg]
    live["spec"]["replicas"] = 7


def _gpu(live: dict) -> None:  # type: ignore[type-arg]
    live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu")


@pytest.mark.parametrize(
    ("edit", "needle"),
    [(_image, "image"), (_args, "args"), (_replicas, "replicas"), (_gpu, "nvidia.com/gpu")],
)
def test_hand_edits_are_drift(edit, needle: str) -> None:  # type: ignore[no-untyped-def]
    found = difference(DEPLOYMENT, live_with(edit))
    assert found is not None and needle in found


@pytest.mark.parametrize(
    ("desired", "live", "same"),
    [
        ("500m", "0.5", True),
        ("1Gi", "1024Mi", True),
        ("2", 2, True),
        ("2", "3", False),
        (True, 1, False),
    ],
)
def test_quantities_compare_by_value(desired: object, live: object, same: bool) -> None:
    assert (difference({"q": desired}, {"q": live}) is None) is same
