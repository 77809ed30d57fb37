"""The in-cluster calibration's decisions: when to start, watch or leave a service alone, the
Job it renders, what a finished Job means, and the result's round trip through a termination
message."""

from __future__ import annotations

from typing import Any

import pytest

from tokenpilot.adapters.calibration_progress import progress_url
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.calibration.cluster import (
    RECALIBRATE_ANNOTATION,
    RESULT_MAX_BYTES,
    Action,
    JobPhase,
    JobSettings,
    JobState,
    decide,
    decode_result,
    encode_result,
    judge_job,
    key_of,
    render_job,
)


def service(calibration: str = "Auto", annotations: dict[str, str] | None = None) -> LLMService:
    return LLMService.model_validate(
        {
            "apiVersion": "serving.tokenpilot.dev/v1alpha1",
            "kind": "LLMService",
            "metadata": {
                "name": "chat",
                "namespace": "team",
                "uid": "u-1",
                "annotations": annotations or {},
            },
            "spec": {
                "model": {
                    "name": "llama-8b",
                    "source": "hf://meta-llama/Llama-3.1-8B-Instruct",
                    "shape": {"preset": "llama-3.1-8b"},
                },
                "batching": {"calibration": calibration},
            },
        }
    )


def decision(svc: LLMService, **kw: Any) -> Action:
    key = key_of(svc, "H100-80GB")
    args: dict[str, Any] = {
        "measured_keys": frozenset(),
        "job": JobPhase.none,
        "ready_engine": True,
        "honoured_request": None,
    }
    args.update(kw)
    return decide(svc, key, **args).action


def test_auto_on_an_unmeasured_key_starts_once_an_engine_is_ready() -> None:
    assert decision(service()) is Action.start
    assert decision(service(), ready_engine=False) is Action.wait
    assert decision(service(), job=JobPhase.active) is Action.watch
    assert decision(service("Off")) is Action.nothing


def test_a_measured_key_is_not_calibrated_again_unless_asked() -> None:
    svc = service()
    measured = frozenset({key_of(svc, "H100-80GB").digest})
    assert decision(svc, measured_keys=measured) is Action.nothing
    asked = service(annotations={RECALIBRATE_ANNOTATION: "2026-11-24"})
    assert decision(asked, measured_keys=measured) is Action.start
    # The request was answered already: nothing more until its value changes.
    assert decision(asked, measured_keys=measured, honoured_request="2026-11-24") is Action.nothing


def test_a_judged_job_is_not_retried() -> None:
    assert decision(service(), job=JobPhase.judged) is Action.nothing


def rendered_job(*extra_args: str) -> dict[str, Any]:
    svc = service()
    return render_job(
        svc,
        key_of(svc, "H100-80GB"),
        endpoint="http://10.0.0.7:8000",
        budget_tokens=512,
        settings=JobSettings("ghcr.io/tokenpilot/operator:1.0", extra_args=extra_args),
    )


def test_the_job_is_owned_by_the_service_and_runs_calibrate_once() -> None:
    job = rendered_job("--time-scale", "5")
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("LLMService", "chat", "u-1")
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "calibrate"
    assert args[args.index("--endpoint") + 1] == "http://10.0.0.7:8000"
    assert args[args.index("--model-shape") + 1] == "llama-3.1-8b"
    assert args[args.index("--result-file") + 1] == container["terminationMessagePath"]
    assert args[-2:] == ["--time-scale", "5"]


def test_the_job_reports_progress_on_its_own_pod_ip() -> None:
    job = rendered_job()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    (env,) = container["env"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    (port,) = container["ports"]
    args = container["args"]
    # The kubelet expands $(POD_IP) from the container's own variable.
    address = f"$({env['name']}):{port['containerPort']}"
    assert args[args.index("--progress-address") + 1] == address
    pod = {"spec": {"containers": [container]}, "status": {"podIP": "10.1.2.3"}}
    assert progress_url(pod) == f"http://10.1.2.3:{port['containerPort']}/progress"
    assert progress_url({"spec": {"containers": [container]}, "status": {}}) is None


def pod(exit_code: int, message: str = "") -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": exit_code}
    if message:
        terminated["message"] = message
    return {"status": {"containerStatuses": [{"state": {"terminated": terminated}}]}}


def test_a_finished_job_is_judged_with_its_reason() -> None:
    assert judge_job({"status": {"active": 1}}, []).state is JobState.running
    ok = judge_job({"status": {"succeeded": 1}}, [pod(0, encode_result("name: X\n"))])
    assert ok.state is JobState.succeeded
    assert decode_result(ok.result or "") == "name: X\n"
    failed = judge_job(
        {"status": {"failed": 1}}, [pod(1, "progress\ncalibrate: the engine closed the stream")]
    )
    assert failed.state is JobState.failed
    assert "the engine failed the protocol" in failed.message
    assert "the engine closed the stream" in failed.message
    empty = judge_job({"status": {"succeeded": 1}}, [pod(0)])
    assert (empty.state, empty.reason) == (JobState.failed, "NoResult")


def test_a_result_too_large_for_a_termination_message_is_refused() -> None:
    big = "".join(f"{i:x}" for i in range(400_000))  # incompressible enough
    with pytest.raises(ValueError, match="termination message"):
        encode_result(big)
    assert len(encode_result("name: X\n")) < RESULT_MAX_BYTES
    with pytest.raises(ValueError, match="does not start with"):
        decode_result("garbage")
