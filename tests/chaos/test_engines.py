"""Engines that misbehave: crash-looping, never Ready, a /metrics that accepts connections and
never answers. Expected: the operator says what is wrong, the autoscaler holds (no scale-up
spiral on a fleet that cannot serve), and other services keep being scaled."""

from __future__ import annotations

import time
from typing import Any

from _chaos import (
    Operator,
    check_invariants,
    converge,
    ready,
    service,
    spec_of,
    status,
)
from _operator_harness import create, patch_spec

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot_lab.devcluster.pytest_plugin import eventually

WATCH_S = 20.0  # how long the autoscaler is watched for a spiral: twenty evaluations


def _scale(client: KubeClient, namespace: str, name: str) -> int:
    return int(
        client.request("GET", LLMSERVICES.path(namespace, name) + "/scale")["spec"]["replicas"]
    )


def _condition(client: KubeClient, namespace: str, name: str, kind: str) -> dict[str, Any]:
    found = [c for c in status(client, namespace, name).get("conditions", []) if c["type"] == kind]
    return found[0] if found else {}


def _restarts(client: KubeClient, namespace: str) -> int:
    pods = client.request("GET", RESOURCES[("v1", "Pod")].path(namespace))["items"]
    return max(
        (
            s.get("restartCount", 0)
            for p in pods
            for s in (p.get("status") or {}).get("containerStatuses") or []
        ),
        default=0,
    )


def _held(client: KubeClient, namespace: str, name: str, replicas: int) -> None:
    """For WATCH_S, the autoscaler never moves the service off `replicas`."""
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        assert _scale(client, namespace, name) == replicas, "the autoscaler moved a blind fleet"
        time.sleep(1.0)


def test_crash_looping_engines_get_no_scale_up_spiral(
    client: KubeClient, namespace: str, operator: Operator
) -> None:
    body = service(
        namespace, "crash", replicas=2, engine={"extraArgs": ["--block-size", "abc"]}
    )  # the engine refuses its arguments and exits, again and again
    create(client, body)
    started = time.monotonic()
    converge(
        lambda: _restarts(client, namespace) >= 2,
        "crash-looping engines -> restarting, service not Ready",
        since=started,
        timeout_s=90,
    )
    assert not ready(client, namespace, "crash")
    _held(client, namespace, "crash", 2)
    assert status(client, namespace, "crash").get("phase") != "Ready"
    check_invariants(client, namespace, {"crash": spec_of(body)})


def test_crash_looping_engines_are_degraded_naming_crash_loop_back_off(
    client: KubeClient, namespace: str, operator: Operator
) -> None:
    create(client, service(namespace, "crash", engine={"extraArgs": ["--block-size", "abc"]}))
    started = time.monotonic()

    def degraded() -> bool:
        st = status(client, namespace, "crash")
        words = " ".join(c.get("message", "") for c in st.get("conditions", []))
        return st.get("phase") == "Degraded" and "CrashLoopBackOff" in words

    converge(degraded, "crash-looping engines -> Degraded naming it", since=started, timeout_s=90)


def test_engines_that_never_turn_ready(
    client: KubeClient, namespace: str, operator: Operator
) -> None:
    body = service(namespace, "stuck", replicas=2, engine={"image": "tokenpilot.dev/never-ready:1"})
    create(client, body)
    started = time.monotonic()

    def running_not_ready() -> bool:
        pods = client.request("GET", RESOURCES[("v1", "Pod")].path(namespace))["items"]
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        ready_condition = _condition(client, namespace, "stuck", "Ready")
        return (
            phases == ["Running", "Running"]
            and ready_condition.get("status") == "False"
            and bool(ready_condition.get("message"))
        )

    converge(
        running_not_ready,
        "engines never Ready -> Ready False with a reason",
        since=started,
        timeout_s=90,
    )
    _held(client, namespace, "stuck", 2)
    print("never Ready:", _condition(client, namespace, "stuck", "Ready"))
    assert status(client, namespace, "stuck").get("phase") != "Ready"
    check_invariants(client, namespace, {"stuck": spec_of(body)})


def test_a_metrics_endpoint_that_never_answers(
    client: KubeClient, namespace: str, operator: Operator
) -> None:
    slow = service(namespace, "slow", replicas=2, engine={"image": "tokenpilot.dev/hang-metrics:1"})
    fine = service(namespace, "fine")
    create(client, slow)
    create(client, fine)
    started = time.monotonic()

    def bounded() -> bool:
        condition = _condition(client, namespace, "slow", "MetricsAvailable")
        return condition.get("status") == "False" and "scrape timeout" in condition.get(
            "message", ""
        )

    converge(
        bounded,
        "a /metrics that never answers -> MetricsAvailable False naming the scrape timeout",
        since=started,
        timeout_s=90,
    )
    print("hung metrics:", _condition(client, namespace, "slow", "MetricsAvailable"))
    eventually(lambda: ready(client, namespace, "fine", 1), timeout_s=60, what="fine Ready")
    # The other service is still scaled while every scrape of `slow` hangs.
    edited = time.monotonic()
    patch_spec(client, namespace, "fine", {"autoscaling": {"minReplicas": 2}})
    converge(
        lambda: _scale(client, namespace, "fine") == 2,
        "another service scaled while one /metrics hangs",
        since=edited,
        timeout_s=30,
    )
    _held(client, namespace, "slow", 2)
    expected_fine = spec_of(fine)
    expected_fine["autoscaling"]["minReplicas"] = 2
    check_invariants(client, namespace, {"slow": spec_of(slow), "fine": expected_fine})
