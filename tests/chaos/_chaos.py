"""Helpers of the chaos tier: the operator as a restartable process, a service to torment, the
invariants every case checks after the fault (nothing lost, nothing duplicated, replicas within
bounds), and a timer that reports convergence."""

from __future__ import annotations

import copy
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from _operator_harness import get_llms, operator_process, sample, stop_process

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot_lab.devcluster.pytest_plugin import eventually

T = TypeVar("T")
OWNED = (
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
)


class Operator:
    """`tokenpilot run` for one namespace; every start appends to the same log."""

    def __init__(self, kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.logs: list[Path] = []
        self.tmp_path = tmp_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.tmp_path / f"operator-{len(self.logs)}.log"
        self.logs.append(log)
        self.proc = operator_process(self.kubeconfig, self.namespace, log)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last write."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def assert_no_traceback(self) -> None:
        text = self.log_text()
        assert "Traceback" not in text, text[text.index("Traceback") - 2000 :][:6000]


def service(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    """The H100 sample with autoscaling evaluated every second; `spec` keys merged in."""
    body = sample("llama-3.1-8b-h100.yaml", namespace)
    body["metadata"]["name"] = name
    body["spec"]["replicas"] = 1
    body["spec"]["batching"].update(maxNumBatchedTokens=1024, maxNumSeqs=64)
    body["spec"]["autoscaling"].update(minReplicas=1, maxReplicas=4, interval="1s")
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(body["spec"].get(key), dict):
            body["spec"][key].update(value)
        else:
            body["spec"][key] = value
    return body


def status(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_llms(client, namespace, name).get("status") or {})


def ready(client: KubeClient, namespace: str, name: str, replicas: int | None = None) -> bool:
    """Ready for the current generation (with `replicas` ready, when given)."""
    body = get_llms(client, namespace, name)
    st = body.get("status") or {}
    return (
        st.get("phase") == "Ready"
        and st.get("observedGeneration") == body["metadata"]["generation"]
        and (replicas is None or st.get("readyReplicas") == replicas)
    )


def owned_names(client: KubeClient, namespace: str, key: tuple[str, str]) -> list[str]:
    items = client.request("GET", RESOURCES[key].path(namespace)).get("items", [])
    return sorted(
        i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp")
    )


def check_invariants(
    client: KubeClient, namespace: str, expected: dict[str, dict[str, Any]]
) -> None:
    """Nothing lost or duplicated: each service's spec is what the test last wrote (no field
    dropped or changed by the operator), exactly one Deployment, Service and PDB per service
    and no other, and spec.replicas (and the Deployment's) within the autoscaling bounds."""
    for key in OWNED:
        assert owned_names(client, namespace, key) == sorted(expected), key
    for name, spec in expected.items():
        live = get_llms(client, namespace, name)["spec"]
        for field, value in spec.items():
            if field == "replicas":
                continue  # the autoscaler's to move, within bounds (below)
            assert contains(live.get(field), value), f"{name}: spec.{field} {live.get(field)}"
        low, high = (live["autoscaling"][k] for k in ("minReplicas", "maxReplicas"))
        deployment = client.request("GET", RESOURCES[OWNED[0]].path(namespace, name))
        for replicas in (live["replicas"], deployment["spec"]["replicas"]):
            assert low <= replicas <= high, f"{name}: {replicas} replicas outside [{low}, {high}]"


def contains(live: Any, sent: Any) -> bool:
    """Everything sent is still there (the API server may add defaults beside it)."""
    if isinstance(sent, dict):
        return isinstance(live, dict) and all(contains(live.get(k), v) for k, v in sent.items())
    return bool(live == sent)


def spec_of(body: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(body["spec"])


def converge(check: Callable[[], T | None], case: str, *, since: float, timeout_s: float) -> T:
    """Wait for `check`; report the seconds from `since` (a monotonic time) to convergence."""
    result = eventually(check, timeout_s=timeout_s, what=case)
    print(f"\nchaos: {case}: {time.monotonic() - since:.1f} s")
    return result
