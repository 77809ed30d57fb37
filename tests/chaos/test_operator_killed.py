"""The operator SIGKILLed in the middle of its work, and a service deleted under an autoscaler
that is scaling it. Expected: a fresh operator process picks up where the dead one stopped,
from the cluster's state alone; nothing is applied twice or left behind."""

from __future__ import annotations

import time

from _chaos import (
    Operator,
    check_invariants,
    converge,
    owned_names,
    ready,
    service,
    spec_of,
    status,
)
from _operator_harness import create, patch_spec

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES, RESOURCES
from tokenpilot_lab.devcluster.pytest_plugin import eventually

BOUND_S = 90.0
QUIET_S = 6.0  # three resyncs of the test operator: long enough to recreate what it would


def _scale(client: KubeClient, namespace: str, name: str) -> int:
    return int(
        client.request("GET", LLMSERVICES.path(namespace, name) + "/scale")["spec"]["replicas"]
    )


def _nothing_left(client: KubeClient, namespace: str) -> bool:
    kinds = [
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("policy/v1", "PodDisruptionBudget"),
        ("apps/v1", "ReplicaSet"),
    ]
    return not any(owned_names(client, namespace, k) for k in kinds)


def test_operator_killed_during_a_scale_up(
    client: KubeClient, namespace: str, operator: Operator
) -> None:
    body = service(namespace, "grow")
    create(client, body)
    eventually(lambda: ready(client, namespace, "grow", 1), timeout_s=90, what="Ready 1/1")

    patch_spec(client, namespace, "grow", {"autoscaling": {"minReplicas": 3}})
    eventually(lambda: _scale(client, namespace, "grow") == 3, timeout_s=30, what="scale to 3")
    operator.kill()
    started = time.monotonic()
    operator.start()
    converge(
        lambda: ready(client, namespace, "grow", 3),
        "operator SIGKILLed during a scale-up -> 3/3 Ready after a restart",
        since=started,
        timeout_s=BOUND_S,
    )
    expected = spec_of(body)
    expected["autoscaling"]["minReplicas"] = 3
    check_invariants(client, namespace, {"grow": expected})
    # One ReplicaSet: the restart rolled nothing.
    assert len(owned_names(client, namespace, ("apps/v1", "ReplicaSet"))) == 1


def test_operator_killed_during_an_infeasible_to_fixed_edit(
    client: KubeClient, namespace: str, operator: Operator
) -> None:
    body = service(namespace, "fix", accelerator={"sku": "NoSuchGPU"})
    create(client, body)
    eventually(
        lambda: status(client, namespace, "fix").get("phase") == "Infeasible",
        timeout_s=60,
        what="Infeasible for an unknown SKU",
    )
    assert owned_names(client, namespace, ("apps/v1", "Deployment")) == []

    patch_spec(client, namespace, "fix", {"accelerator": {"sku": "auto"}})
    operator.kill()
    started = time.monotonic()
    operator.start()
    converge(
        lambda: ready(client, namespace, "fix", 1),
        "operator SIGKILLed during an Infeasible -> fixed edit -> Ready after a restart",
        since=started,
        timeout_s=BOUND_S,
    )
    expected = spec_of(body)
    expected["accelerator"]["sku"] = "auto"
    check_invariants(client, namespace, {"fix": expected})
    conditions = {c["type"]: c for c in status(client, namespace, "fix").get("conditions", [])}
    assert conditions.get("Infeasible", {}).get("status") != "True"


def test_operator_killed_during_deletion(
    client: KubeClient, namespace: str, operator: Operator
) -> None:
    create(client, service(namespace, "gone", replicas=2, autoscaling={"minReplicas": 2}))
    create(client, service(namespace, "stays"))
    eventually(lambda: ready(client, namespace, "gone", 2), timeout_s=90, what="gone Ready 2/2")
    eventually(lambda: ready(client, namespace, "stays", 1), timeout_s=90, what="stays Ready")
    stays = spec_of(client.request("GET", LLMSERVICES.path(namespace, "stays")))

    client.request("DELETE", LLMSERVICES.path(namespace, "gone"))
    operator.kill()
    started = time.monotonic()
    operator.start()

    def only_stays() -> bool:
        return (
            all(
                owned_names(client, namespace, key) == ["stays"]
                for key in (
                    ("apps/v1", "Deployment"),
                    ("v1", "Service"),
                    ("policy/v1", "PodDisruptionBudget"),
                )
            )
            and client.get(LLMSERVICES.path(namespace, "gone")) is None
        )

    converge(
        only_stays,
        "operator SIGKILLed during deletion -> the deleted service's objects gone",
        since=started,
        timeout_s=BOUND_S,
    )
    time.sleep(QUIET_S)
    assert only_stays(), "the restarted operator recreated something of a deleted service"
    check_invariants(client, namespace, {"stays": stays})


def test_service_deleted_while_its_scale_up_is_in_flight(
    client: KubeClient, namespace: str, operator: Operator
) -> None:
    create(client, service(namespace, "brief"))
    eventually(lambda: ready(client, namespace, "brief", 1), timeout_s=90, what="Ready 1/1")

    patch_spec(client, namespace, "brief", {"autoscaling": {"minReplicas": 4}})
    eventually(lambda: _scale(client, namespace, "brief") == 4, timeout_s=30, what="scale to 4")
    started = time.monotonic()
    client.request("DELETE", LLMSERVICES.path(namespace, "brief"))
    converge(
        lambda: _nothing_left(client, namespace),
        "service deleted during its scale-up -> everything of it gone",
        since=started,
        timeout_s=BOUND_S,
    )
    time.sleep(QUIET_S)
    assert _nothing_left(client, namespace), "the autoscaler or a reconcile brought it back"
    pods = client.request("GET", RESOURCES[("v1", "Pod")].path(namespace))["items"]
    assert all(p["metadata"].get("deletionTimestamp") for p in pods)
    assert operator.alive()
