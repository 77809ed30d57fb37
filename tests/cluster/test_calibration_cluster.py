"""Calibration in the cluster (spec.batching.calibration: Auto), on the real API server.

The engine pods are engine-sim processes (the pod runner) timing steps like an A100 on nodes
labelled H100, so the measured H100 profile is far off the datasheet one and the tuned budget
moves. The calibration Job's pod runs the operator image, which the pod runner maps to the local
`tokenpilot`; engine and calibration agree on a time scale that keeps a run to seconds (the
failure and deletion tests use a slower one, so the run is still going when they act).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _operator_harness import client_for, create, get_llms, install_crd, operator_thread, sample

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.calibration import MEASURED_LABEL
from tokenpilot.adapters.kube.resources import JOBS, LLMSERVICES
from tokenpilot.core.calibration.cluster import RECALIBRATE_ANNOTATION
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster

NAME = "llama-8b"
# How status.tuning's reason names a profile measured by calibration.
CALIBRATED = "profile measured by tokenpilot calibrate"


def service(namespace: str, time_scale: int) -> dict[str, Any]:
    body = sample("llama-3.1-8b-h100.yaml", namespace)
    body["spec"]["replicas"] = 1
    body["spec"]["autoscaling"]["enabled"] = False
    body["spec"]["batching"]["calibration"] = "Auto"
    body["spec"]["engine"]["extraArgs"] = [
        "--gpu=A100-80GB",
        "--model-shape=llama-3.1-8b",
        f"--time-scale={time_scale}",
    ]
    return body


@pytest.fixture
def client(kubeconfig: Path) -> KubeClient:
    client = client_for(kubeconfig)
    install_crd(client)
    return client


@contextmanager
def operator(kubeconfig: Path, namespace: str, time_scale: int) -> Iterator[None]:
    with operator_thread(
        kubeconfig,
        namespace,
        profiles_configmap=f"{namespace}/gpu-profiles",
        calibration_args=("--time-scale", str(time_scale)),
    ):
        try:
            yield
        finally:
            remove_services(client_for(kubeconfig), namespace)


def remove_services(client: KubeClient, namespace: str) -> None:
    for item in (client.get(LLMSERVICES.path(namespace)) or {}).get("items", []):
        client.request("DELETE", LLMSERVICES.path(namespace, item["metadata"]["name"]))
    eventually(
        lambda: not (client.get(LLMSERVICES.path(namespace)) or {}).get("items"),
        timeout_s=60,
        what="the test's services deleted",
    )


def status(client: KubeClient, namespace: str) -> dict[str, Any]:
    return dict(get_llms(client, namespace, NAME).get("status") or {})


def condition(client: KubeClient, namespace: str, type_: str) -> dict[str, Any] | None:
    return condition_of(status(client, namespace), type_)


def condition_of(service_status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    found = service_status.get("conditions") or []
    return next((c for c in found if c["type"] == type_), None)


def jobs(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    return list(client.request("GET", JOBS.path(namespace)).get("items") or [])


def job_pods(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    listed = client.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": "job-name"}
    )
    return list(listed.get("items") or [])


def events(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    return list(client.request("GET", f"/api/v1/namespaces/{namespace}/events").get("items") or [])


def calibration_state(client: KubeClient, namespace: str) -> str:
    """What the calibration looks like now, for a failure's message."""
    return repr(
        {
            "condition": condition(client, namespace, "Calibrating"),
            "calibration": status(client, namespace).get("calibration"),
            "budget": (status(client, namespace).get("tuning") or {}).get("maxNumBatchedTokens"),
            "engines": [
                (p["metadata"]["name"], p["spec"]["containers"][0].get("args"), p.get("status"))
                for p in client.request(
                    "GET",
                    f"/api/v1/namespaces/{namespace}/pods",
                    query={"labelSelector": f"serving.tokenpilot.dev/llmservice={NAME}"},
                )["items"]
            ],
            "jobs": [j.get("status") for j in jobs(client, namespace)],
            "pods": [
                (p["spec"].get("nodeName"), p.get("status")) for p in job_pods(client, namespace)
            ],
        }
    )


def running(client: KubeClient, namespace: str) -> dict[str, Any] | None:
    found = condition(client, namespace, "Calibrating")
    return found if found and found["status"] == "True" else None


# Engine time runs this many times faster than the wall clock in the test that measures a whole
# grid. A decode stream holds 8,192 positions, over a minute of A100 decode steps: about 8 s on
# the wall at 8x, time enough for a point's protocol and its /metrics reads on a busy two-core
# machine (at 20x, about 3 s was not, once).
MEASURE_TIME_SCALE = 8


def test_auto_calibration_measures_once_and_retunes(
    kubeconfig: Path, namespace: str, client: KubeClient
) -> None:
    with operator(kubeconfig, namespace, time_scale=MEASURE_TIME_SCALE):
        create(client, service(namespace, time_scale=MEASURE_TIME_SCALE))
        calibrating = eventually(
            lambda: running(client, namespace), timeout_s=120, what="Calibrating True"
        )
        assert "no measured profile" in calibrating["message"]
        # No finalizer: the service deletes even while the operator is down (the Job and its pod
        # go with it through their owner reference).
        assert not get_llms(client, namespace, NAME)["metadata"].get("finalizers")
        before = status(client, namespace)["tuning"]
        assert CALIBRATED not in before["reason"]

        def measured() -> dict[str, Any] | None:
            found = condition(client, namespace, "Calibrating")
            assert found and found["reason"] == "Measured", calibration_state(client, namespace)
            return found

        done = eventually(measured, timeout_s=180, what="Calibrating False, Measured")
        assert done["status"] == "False"

        def retuned() -> dict[str, Any] | None:
            tuning = status(client, namespace).get("tuning") or {}
            assert CALIBRATED in tuning.get("reason", ""), tuning
            return tuning

        after = eventually(retuned, timeout_s=60, what="tuning on the measured profile")
        assert after["maxNumBatchedTokens"] != before["maxNumBatchedTokens"]
        calibration = status(client, namespace)["calibration"]
        assert calibration["state"] == "Succeeded"
        profile_ref = calibration["profile"]
        assert profile_ref in done["message"]

        # The measured profile as kubectl lists it: a ConfigMap whose labels carry provenance.
        listed = client.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/configmaps",
            query={"labelSelector": MEASURED_LABEL},
        )["items"]
        assert [f"{namespace}/{c['metadata']['name']}" for c in listed] == [profile_ref]
        labels = listed[0]["metadata"]["labels"]
        assert labels["serving.tokenpilot.dev/sku"] == "H100-80GB"
        assert labels["serving.tokenpilot.dev/model"] == "llama-3.1-8b-instruct"
        assert "tokenpilot calibrate" in listed[0]["data"]["profile.yaml"]

        reasons = {e["reason"]: e["message"] for e in events(client, namespace)}
        assert profile_ref in reasons["Calibrated"]

        def ready() -> bool:
            return status(client, namespace).get("phase") == "Ready"

        eventually(ready, timeout_s=120, what="phase Ready on the measured budget")

        # Measured once: the same key is not calibrated again ...
        assert len(jobs(client, namespace)) == 1
        # ... until the user asks with the annotation.
        client.request(
            "PATCH",
            LLMSERVICES.path(namespace, NAME),
            body={"metadata": {"annotations": {RECALIBRATE_ANNOTATION: "1"}}},
            content_type="application/merge-patch+json",
        )

        def second_job() -> bool:
            assert len(jobs(client, namespace)) == 2, calibration_state(client, namespace)
            return True

        eventually(second_job, timeout_s=60, what="a second Job")

        def answered() -> dict[str, Any] | None:
            found = status(client, namespace).get("calibration") or {}
            # The Job's own words first: a long state dump is cut from the end of a CI log.
            assert found.get("request") == "1" and found["state"] == "Succeeded", (
                f"{found.get('state')}: {found.get('message')}; "
                f"{calibration_state(client, namespace)}"
            )
            return found

        eventually(answered, timeout_s=180, what="the requested calibration to finish")
        assert len(jobs(client, namespace)) == 2


def test_deleting_the_service_mid_run_leaves_no_job_and_no_pod(
    kubeconfig: Path, namespace: str, client: KubeClient
) -> None:
    with operator(kubeconfig, namespace, time_scale=2):
        create(client, service(namespace, time_scale=2))
        eventually(lambda: running(client, namespace), timeout_s=120, what="Calibrating True")
        eventually(lambda: job_pods(client, namespace), timeout_s=60, what="the Job's pod")

        def measuring() -> tuple[dict[str, Any], str] | None:
            now = status(client, namespace)  # one read: the condition and progress agree
            found = condition_of(now, "Calibrating")
            progress = (now.get("calibration") or {}).get("progress")
            if not (found and found["status"] == "True" and progress):
                return None
            # The Job reports 0/12 as it starts; wait for its first measured point.
            return (found, progress) if int(progress.split("/")[0]) >= 1 else None

        # While the grid runs, the condition says how far it is (read from the Job's pod).
        progressing, progress = eventually(
            measuring, timeout_s=60, what="Calibrating with progress"
        )
        done, total = (int(n) for n in progress.split("/"))
        assert 1 <= done < total == 12, progress
        assert f"{progress} grid points measured" in progressing["message"]
        client.request(
            "DELETE",
            LLMSERVICES.path(namespace, NAME),
            body={"propagationPolicy": "Background"},
        )

        def all_gone() -> bool:
            return not jobs(client, namespace) and not job_pods(client, namespace)

        eventually(all_gone, timeout_s=120, what="no calibration Job and no pod")


def test_engine_killed_mid_run_keeps_the_budget_and_names_the_failure(
    kubeconfig: Path, namespace: str, client: KubeClient
) -> None:
    with operator(kubeconfig, namespace, time_scale=2):
        create(client, service(namespace, time_scale=2))
        eventually(lambda: running(client, namespace), timeout_s=120, what="Calibrating True")
        before = status(client, namespace)["tuning"]
        eventually(lambda: job_pods(client, namespace), timeout_s=60, what="the Job's pod")

        def kill_engines() -> None:
            # Killed again at each look: kwok may give a new engine pod the old one's IP.
            engines = client.request(
                "GET",
                f"/api/v1/namespaces/{namespace}/pods",
                query={"labelSelector": f"serving.tokenpilot.dev/llmservice={NAME}"},
            )["items"]
            for pod in engines:
                client.request(
                    "DELETE",
                    f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
                    body={"gracePeriodSeconds": 0},
                )

        def failed() -> dict[str, Any] | None:
            kill_engines()
            found = condition(client, namespace, "Calibrating")
            return found if found and found["reason"] == "CalibrationFailed" else None

        found = eventually(
            failed, timeout_s=180, interval_s=1, what="Calibrating False, CalibrationFailed"
        )
        assert found["status"] == "False"
        assert "the engine failed the protocol" in found["message"]
        after = status(client, namespace)["tuning"]
        assert after["maxNumBatchedTokens"] == before["maxNumBatchedTokens"]
        assert CALIBRATED not in after["reason"]
        assert status(client, namespace)["calibration"]["state"] == "Failed"
