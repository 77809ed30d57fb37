"""Pod runner decisions: the status it writes and the probe it runs, from the pod spec."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot_lab.podrunner import probes
from tokenpilot_lab.podrunner.status import ContainerState, status_patch

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:00:05Z"


def _pod(
    containers: list[dict[str, Any]], statuses: list[dict[str, Any]], ready: str = "False"
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "n", "uid": "u"},
        "spec": {"containers": containers},
        "status": {
            "phase": "Running",
            "podIP": "127.3.0.2",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": T0},
                {"type": "Ready", "status": ready, "lastTransitionTime": T0},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": T0},
            ],
            "containerStatuses": statuses,
        },
    }


ENGINE = {"name": "engine", "image": "vllm/vllm-openai:v0"}
SIDECAR = {"name": "sidecar", "image": "busybox"}
SIDECAR_STATUS = {
    "name": "sidecar",
    "image": "busybox",
    "ready": True,
    "started": True,
    "restartCount": 0,
    "state": {"running": {"startedAt": T0}},
    "lastState": {},
}


def _conditions(patch: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in patch["status"]["conditions"]}


def test_pod_is_not_ready_while_the_probe_has_not_passed() -> None:
    pod = _pod([ENGINE, SIDECAR], [SIDECAR_STATUS])
    patch = status_patch(
        pod, {"engine": ContainerState(running=True, ready=False, started_at=T1)}, T1
    )
    assert patch is not None
    conditions = _conditions(patch)
    assert conditions["Ready"]["status"] == "False"
    assert "engine" in conditions["Ready"]["message"]
    assert conditions["Ready"]["lastTransitionTime"] == T0  # no flip, time kept
    assert conditions["PodScheduled"]["status"] == "True"  # other conditions survive
    engine, sidecar = patch["status"]["containerStatuses"]
    assert engine["state"] == {"running": {"startedAt": T1}}
    assert engine["ready"] is False
    assert sidecar == SIDECAR_STATUS


def test_pod_turns_ready_when_the_probe_passes_and_records_the_flip() -> None:
    pod = _pod([ENGINE, SIDECAR], [SIDECAR_STATUS])
    patch = status_patch(
        pod, {"engine": ContainerState(running=True, ready=True, started_at=T1)}, T1
    )
    assert patch is not None
    conditions = _conditions(patch)
    # Reason and message go out as null so the API server clears the not-ready explanation.
    assert conditions["Ready"] == {
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": T1,
        "reason": None,
        "message": None,
    }


def test_no_patch_when_the_status_already_says_it() -> None:
    obs = {"engine": ContainerState(running=True, ready=True, started_at=T1)}
    first = status_patch(_pod([ENGINE], []), obs, T1)
    assert first is not None
    # What the API server returns: our patch plus defaulted fields.
    written = _pod(
        [ENGINE],
        [dict(s, lastState={}) for s in first["status"]["containerStatuses"]],
        ready="True",
    )
    written["status"]["conditions"] = first["status"]["conditions"]
    assert status_patch(written, obs, "2026-01-01T00:01:00Z") is None


@pytest.mark.parametrize(
    ("obs", "reason"),
    [
        (ContainerState(running=False, ready=False), "ContainerCreating"),
        (
            ContainerState(
                running=False,
                ready=False,
                restart_count=2,
                waiting_reason="CrashLoopBackOff",
                last_exit_code=1,
                last_finished_at=T1,
            ),
            "CrashLoopBackOff",
        ),
    ],
)
def test_a_container_without_a_live_process_is_waiting(obs: ContainerState, reason: str) -> None:
    patch = status_patch(_pod([ENGINE], []), {"engine": obs}, T1)
    assert patch is not None
    (engine,) = patch["status"]["containerStatuses"]
    assert engine["state"]["waiting"]["reason"] == reason
    assert engine["restartCount"] == obs.restart_count
    if obs.last_exit_code is not None:
        assert engine["lastState"]["terminated"]["exitCode"] == obs.last_exit_code


@pytest.mark.parametrize(
    ("container", "port", "kind", "path"),
    [
        (
            {
                "ports": [{"containerPort": 8000}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
            },
            8000,
            "http",
            "/health",
        ),
        (
            {
                "ports": [{"name": "http", "containerPort": 9000}],
                "readinessProbe": {"httpGet": {"path": "/h", "port": "http"}},
            },
            9000,
            "http",
            "/h",
        ),
        ({"readinessProbe": {"tcpSocket": {"port": 7000}}}, 7000, "tcp", "/"),
        ({"ports": [{"containerPort": 8000}]}, 8000, "none", "/"),
        ({}, None, "none", "/"),
    ],
)
def test_probe_and_port_come_from_the_container_spec(
    container: dict[str, Any], port: int | None, kind: str, path: str
) -> None:
    spec = probes.readiness_spec(container)
    assert probes.container_port(container) == port
    assert spec.kind == kind
    assert spec.path == path
    if kind != "none":
        assert spec.port == port


def test_probe_timing_follows_the_spec() -> None:
    spec = probes.readiness_spec(
        {
            "readinessProbe": {
                "httpGet": {"port": 1},
                "periodSeconds": 2,
                "failureThreshold": 5,
                "initialDelaySeconds": 3,
                "timeoutSeconds": 4,
            }
        }
    )
    assert (spec.period_s, spec.failure_threshold, spec.initial_delay_s, spec.timeout_s) == (
        2,
        5,
        3,
        4,
    )


_observations = st.builds(
    ContainerState,
    running=st.booleans(),
    ready=st.booleans(),
    restart_count=st.integers(0, 5),
    started_at=st.just(T1),
    waiting_reason=st.sampled_from([None, "ContainerCreating", "CrashLoopBackOff"]),
    last_exit_code=st.one_of(st.none(), st.integers(0, 255)),
    last_finished_at=st.just(T0),
)


@given(st.lists(_observations, min_size=1, max_size=3), st.booleans())
def test_a_written_status_needs_no_second_write(
    observed: list[ContainerState], sidecar: bool
) -> None:
    """Property: once the API holds our patch, the same observations produce no patch."""
    containers = [{"name": f"c{i}", "image": "vllm/vllm-openai:v0"} for i in range(len(observed))]
    statuses = []
    if sidecar:
        containers.append(SIDECAR)
        statuses.append(SIDECAR_STATUS)
    pod = _pod(containers, statuses)
    by_name = {f"c{i}": o for i, o in enumerate(observed)}
    patch = status_patch(pod, by_name, T1)
    assert patch is not None
    # What the API server keeps of a strategic-merge status patch: the lists as sent, nulls gone.
    written = dict(pod, status=dict(pod["status"]))
    written["status"]["containerStatuses"] = patch["status"]["containerStatuses"]
    written["status"]["conditions"] = [
        {k: v for k, v in c.items() if v is not None} for c in patch["status"]["conditions"]
    ]
    assert status_patch(written, by_name, "2026-01-01T00:09:00Z") is None
    ready = next(c for c in written["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"] == "True") == all(o.running and o.ready for o in observed)
