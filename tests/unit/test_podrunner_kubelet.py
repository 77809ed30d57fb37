"""The kubelet's ways the pod runner copies, so the API server carries real pod statuses: memory
limits, a failed container's log tail as its termination message, OOMKilled and images that
cannot be pulled."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from tokenpilot_lab.podrunner import imagemap, kubelet
from tokenpilot_lab.podrunner.status import ContainerState, status_patch

T0 = "2026-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("memory", "expected"),
    [("16Mi", 16 * 2**20), ("1Gi", 2**30), ("500M", 500 * 10**6), ("1024", 1024), ("", None)],
)
def test_memory_limits_as_the_api_writes_them(memory: str, expected: int | None) -> None:
    container = {"resources": {"limits": {"memory": memory}}} if memory else {}
    assert kubelet.memory_limit_bytes(container) == expected


def test_resident_memory_of_this_process_is_counted() -> None:
    assert kubelet.resident_bytes(os.getpid()) > 2**20
    assert kubelet.resident_bytes(2**22 + 12345) == 0  # no such process


def test_the_termination_message_is_this_runs_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_text("an earlier run's last words\n")
    offset = log.stat().st_size
    with log.open("a") as handle:
        handle.write("".join(f"line {i}\n" for i in range(200)))
        handle.write("error: argument --block-size: invalid int value: 'abc'\n")
    message = kubelet.termination_message(log, offset)
    assert message.endswith("invalid int value: 'abc'")
    assert "earlier run" not in message
    assert len(message.splitlines()) <= kubelet.TERMINATION_LOG_LINES
    assert len(message.encode()) <= kubelet.TERMINATION_LOG_BYTES


def test_an_oom_kill_and_its_message_reach_the_status() -> None:
    pod = {
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0"}]},
        "status": {"conditions": []},
    }
    observed = ContainerState(
        running=False,
        ready=False,
        restart_count=1,
        waiting_reason="CrashLoopBackOff",
        last_exit_code=137,
        last_reason="OOMKilled",
        last_message="killed",
    )
    patch = status_patch(pod, {"vllm": observed}, T0)
    assert patch is not None
    (status,) = patch["status"]["containerStatuses"]
    terminated = status["lastState"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"], terminated["message"]) == (
        "OOMKilled",
        137,
        "killed",
    )


def test_images_of_an_invalid_registry_cannot_be_pulled() -> None:
    rule = imagemap.load(None).rule_for("registry.invalid/vllm/vllm-openai:v1")
    assert rule is not None and rule.pull_error and not rule.command
    # ...and kwok leaves them to the pod runner, as every mapped image.
    assert imagemap.load(None).regex()


def test_a_rule_is_a_command_or_a_pull_error() -> None:
    with pytest.raises(ValidationError, match="either command"):
        imagemap.ImageRule.model_validate({"image": "x", "command": ["y"], "pullError": "z"})
    with pytest.raises(ValidationError, match="either command"):
        imagemap.ImageRule.model_validate({"image": "x"})
