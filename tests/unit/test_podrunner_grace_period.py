"""The grace period and preStop sleep the pod runner allows a pod's process, read from the pod
as a kubelet does."""

from __future__ import annotations

from typing import Any

import pytest

from tokenpilot_lab.podrunner.termination import (
    DEFAULT_GRACE_S,
    grace_period_s,
    prestop_sleep_s,
)

DELETED = "2026-01-01T00:00:00Z"


def _pod(
    *, spec_s: int | None = None, deletion_s: int | None = None, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "uid": "u"}
    if deleting:
        meta["deletionTimestamp"] = DELETED
    if deletion_s is not None:
        meta["deletionGracePeriodSeconds"] = deletion_s
    spec: dict[str, Any] = {"containers": []}
    if spec_s is not None:
        spec["terminationGracePeriodSeconds"] = spec_s
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("pod", "expected_s"),
    [
        (_pod(), DEFAULT_GRACE_S),  # nothing set: the API server's default
        (_pod(spec_s=60), 60.0),  # the operator's engine pods ask for time to drain
        (_pod(spec_s=0), 0.0),
        (_pod(spec_s=60, deleting=True, deletion_s=60), 60.0),
        (_pod(spec_s=60, deleting=True, deletion_s=5), 5.0),  # `delete --grace-period=5`
        (_pod(spec_s=60, deleting=True), 60.0),  # deleting, no deletion grace recorded
        (_pod(spec_s=60, deletion_s=5), 60.0),  # a deletion grace without deletion: ignored
        (_pod(spec_s=-1), 0.0),
    ],
)
def test_grace_period_follows_the_deletion_then_the_spec(
    pod: dict[str, Any], expected_s: float
) -> None:
    assert grace_period_s(pod) == expected_s


def test_only_a_prestop_sleep_is_run() -> None:
    engine = {"lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}
    assert prestop_sleep_s(engine) == 5.0
    assert prestop_sleep_s({"lifecycle": {"preStop": {"exec": {"command": ["true"]}}}}) == 0.0
    assert prestop_sleep_s({}) == 0.0
