"""Why engine pods cannot run, from their status as the scheduler and the kubelet write it, and
the one condition that says so: the reason, how many, the cause and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from _llms import service
from hypothesis import given
from hypothesis import strategies as st

from tokenpilot.core.batching import spec_decision
from tokenpilot.core.pod_health import ORDER, PodFailure, pod_failure, pod_failures, verdict
from tokenpilot.core.retune import Tuning
from tokenpilot.core.status import DeploymentFacts, desired_status

T0 = "2026-01-01T00:00:00Z"
ROLLING = DeploymentFacts(4, 4, 1, 2, 1, 1, available_replicas=1)


def pod(name: str = "p", *, ready: bool = False, **container: Any) -> dict[str, Any]:
    status = {"name": "vllm", "ready": ready, "restartCount": 0, **container}
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v1",
                                 "resources": {"limits": {"memory": "16Gi"}}}]},
        "status": {"phase": "Running", "containerStatuses": [status]},
    }  # fmt: skip


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"state": {"waiting": {"reason": reason, "message": message}}}


def crashed(code: int, message: str = "", reason: str = "Error") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, "message": message}}


UNSCHEDULABLE = {
    "metadata": {"name": "u"},
    "spec": {"containers": [{"name": "vllm", "image": "x"}]},
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) "
                "didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: "
                "1 No preemption victims found for incoming pod.",
            }
        ],
    },
}


@pytest.mark.parametrize(
    ("body", "reason", "cause"),
    [
        (UNSCHEDULABLE, "Unschedulable", "1 Insufficient nvidia.com/gpu"),
        (
            pod(**waiting("CreateContainerConfigError", 'secret "hf-token" not found')),
            "CreateContainerConfigError",
            'secret "hf-token" not found',
        ),
        (pod(**waiting("ErrImagePull", "dial tcp")), "ImagePullBackOff", "dial tcp"),
        (pod(**waiting("ImagePullBackOff", "Back-off")), "ImagePullBackOff", "Back-off"),
        (
            pod(
                restartCount=2,
                lastState=crashed(2, "usage: ...\nerror: argument --block-size: invalid int\n"),
                **waiting("CrashLoopBackOff"),
            ),
            "CrashLoopBackOff",
            "exit code 2: error: argument --block-size: invalid int",
        ),
        # Restarted and running again, not ready yet: still the crash, not a flip of reason.
        (
            pod(restartCount=1, lastState=crashed(1), state={"running": {}}),
            "CrashLoopBackOff",
            "exit code 1",
        ),
        (
            pod(
                restartCount=1,
                lastState=crashed(137, reason="OOMKilled"),
                **waiting("CrashLoopBackOff"),
            ),
            "OOMKilled",
            "",
        ),
    ],
    ids=[
        "unschedulable",
        "secret",
        "err-image-pull",
        "image-backoff",
        "crash",
        "restarting",
        "oom",
    ],
)
def test_each_reason_from_the_pod_status(body: dict[str, Any], reason: str, cause: str) -> None:
    failure = pod_failure(body)
    assert failure is not None and failure.reason == reason
    assert cause in failure.cause
    assert "preemption" not in failure.cause


@pytest.mark.parametrize(
    "body",
    [
        pod(ready=True),
        pod(ready=True, restartCount=3, lastState=crashed(137, reason="OOMKilled")),
        pod(**waiting("ContainerCreating")),
        pod(state={"running": {}}),  # loading the model: the startup probe's business
    ],
    ids=["ready", "ready-after-crashes", "creating", "starting"],
)
def test_a_pod_that_is_fine_or_starting_has_no_failure(body: dict[str, Any]) -> None:
    assert pod_failure(body) is None


def test_a_deleting_pod_is_not_counted() -> None:
    going = pod(**waiting("CrashLoopBackOff"), restartCount=1, lastState=crashed(1))
    going["metadata"]["deletionTimestamp"] = T0
    assert pod_failures([going]) == []


def test_the_verdict_names_the_count_the_cause_and_the_fix() -> None:
    svc = service(model__hubTokenSecret={"name": "hf-token"})
    failures = pod_failures(
        [
            pod("a", **waiting("CreateContainerConfigError", 'secret "hf-token" not found')),
            pod("b", **waiting("CreateContainerConfigError", 'secret "hf-token" not found')),
            UNSCHEDULABLE,
        ]
    )
    found = verdict(svc, failures, num_pods=3)
    assert found.reason == "CreateContainerConfigError"
    assert found.message == (
        '2 of 3 engine pods in CreateContainerConfigError: secret "hf-token" not found '
        "(also 1 Unschedulable); create it: kubectl create secret generic hf-token -n ml "
        "--from-literal=token=<your Hugging Face token>, or remove model.hubTokenSecret"
    )


def test_a_missing_key_asks_for_the_key() -> None:
    svc = service(model__hubTokenSecret={"name": "hf-token", "key": "token"})
    failures = pod_failures(
        [pod(**waiting("CreateContainerConfigError", "couldn't find key token in Secret ml/hf"))]
    )
    assert "add the key token to Secret hf-token" in verdict(svc, failures, 1).message


@pytest.mark.parametrize(
    ("kubelet_says", "said"),
    [
        (
            'Back-off pulling image "vllm/vllm-openai:v1": no such host',
            'in ImagePullBackOff: Back-off pulling image "vllm/vllm-openai:v1": no such host',
        ),
        ("no such host", "in ImagePullBackOff pulling vllm/vllm-openai:v1: no such host"),
    ],
)
def test_an_image_that_cannot_be_pulled_is_named_once(kubelet_says: str, said: str) -> None:
    failures = pod_failures([pod(**waiting("ImagePullBackOff", kubelet_says))])
    message = verdict(service(), failures, 1).message
    assert f"1 of 1 engine pods {said}; correct engine.image" in message


def test_oom_names_the_limit() -> None:
    body = pod(restartCount=1, lastState=crashed(137, reason="OOMKilled"))
    message = verdict(service(), pod_failures([body]), 1).message
    assert "OOMKilled at their memory limit of 16Gi" in message
    assert "engine.resources.limits.memory" in message


def test_degraded_status_carries_the_verdict_in_ready_and_degraded_only() -> None:
    body = pod(restartCount=1, lastState=crashed(2, "bad flag"), **waiting("CrashLoopBackOff"))
    status = desired_status(
        service(),
        deployment=ROLLING,
        sku_name="L40S",
        tuning=Tuning.of(spec_decision(2048, 64)),
        problem=None,
        now=T0,
        pod_failures=pod_failures([body]),
        num_pods=2,
    )
    assert status["phase"] == "Degraded"
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Ready"]["status"] == "False"
    assert by_type["Ready"]["reason"] == by_type["Degraded"]["reason"] == "CrashLoopBackOff"
    assert by_type["Ready"]["message"] == by_type["Degraded"]["message"]
    assert by_type["Ready"]["message"].startswith("1 of 2 engine pods in CrashLoopBackOff")
    assert by_type["Progressing"]["message"] == ""


@given(st.lists(st.sampled_from(ORDER), min_size=1, max_size=6))
def test_the_reported_reason_is_the_commonest(reasons: list[str]) -> None:
    failures = [PodFailure(r, f"p{i}", "cause") for i, r in enumerate(reasons)]
    found = verdict(service(), failures, len(failures))
    assert reasons.count(found.reason) == max(reasons.count(r) for r in reasons)
    assert found.message.startswith(f"{reasons.count(found.reason)} of {len(reasons)} ")
