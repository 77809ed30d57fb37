"""Autoscaler shards on the real API server: two `tokenpilot run` replicas with
`--autoscaler-shards 4 --autoscaler-replicas 2` each hold two shards and evaluate only their
services, every service by exactly one of them; when one is killed, the other takes its shards
as orphans (two lease durations) and evaluates every service.

Evaluations are counted on each replica's own /metrics (`tokenpilot_decisions_total`); the
engine pods are kwok's fakes, so each evaluation holds for want of metrics, which is still an
evaluation by the replica that holds the service's shard.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen

import pytest
from _operator_harness import (
    create,
    elected_operator,
    metrics_ports,
    operator_page,
    sample,
    stop_process,
)

from tokenpilot.adapters.kube import KubeClient
from tokenpilot_lab.devcluster.pytest_plugin import eventually, within

pytestmark = pytest.mark.cluster
SERVICES = [f"svc-{i}" for i in range(6)]
IMAGE = "soak.example/vllm-openai:fake"  # not in the pod runner's map: kwok fakes the pod
SHARD_FLAGS = ("--autoscaler-shards", "4", "--autoscaler-replicas", "2")


def held(port: int) -> float | None:
    page = operator_page(port)
    return None if page is None else page.sum("tokenpilot_autoscaler_shards_held")


def evaluations(port: int, namespace: str) -> dict[str, float]:
    """Evaluations so far per service, on one replica's /metrics."""
    page = operator_page(port)
    if page is None:
        return {}
    out: dict[str, float] = {}
    for s in page.series("tokenpilot_decisions_total", namespace=namespace):
        out[s.labels["llmservice"]] = out.get(s.labels["llmservice"], 0.0) + s.value
    return out


def evaluating(ports: list[int], namespace: str) -> dict[str, list[int]]:
    """Which replicas evaluate each service: those whose count of its evaluations rises while
    it is evaluated three times (its interval is 2 s), within 20 s."""
    before = [evaluations(p, namespace) for p in ports]

    def rises() -> dict[str, list[int]] | None:
        after = [evaluations(p, namespace) for p in ports]
        rose = {
            svc: [after[i].get(svc, 0.0) - before[i].get(svc, 0.0) for i in range(len(ports))]
            for svc in SERVICES
        }
        if not all(sum(by) >= 3 for by in rose.values()):
            return None
        return {svc: [i for i, n in enumerate(by) if n > 0] for svc, by in rose.items()}

    return within(rises, timeout_s=20, interval_s=0.5) or {svc: [] for svc in SERVICES}


def replica(kubeconfig: Path, namespace: str, logs: Path, index: int, port: int) -> Popen[bytes]:
    flags = (*SHARD_FLAGS, "--metrics-port", str(port), "--metrics-address", "127.0.0.1")
    log = logs / f"replica-{index}.log"
    return elected_operator(kubeconfig, namespace, log, f"replica-{index}", *flags)


@pytest.fixture
def services(client: KubeClient, namespace: str) -> Iterator[None]:
    for name in SERVICES:
        body = sample(
            "llama-3.1-8b-h100.yaml",
            namespace,
            engine={"image": IMAGE, "maxModelLen": 8192},
            autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 2, "interval": "2s"},
            replicas=1,
        )
        body["metadata"]["name"] = name
        create(client, body)
    yield


def test_two_replicas_share_the_services_and_one_takes_all_when_the_other_dies(
    kubeconfig: Path, namespace: str, services: None, tmp_path: Path
) -> None:
    ports = list(metrics_ports(2))
    procs = [replica(kubeconfig, namespace, tmp_path, i, port) for i, port in enumerate(ports)]
    try:
        eventually(
            lambda: [held(p) for p in ports] == [2.0, 2.0],
            timeout_s=90,
            what="each replica to hold two of the four shards",
        )

        def each_by_one() -> bool:
            return all(len(by) == 1 for by in evaluating(ports, namespace).values())

        eventually(each_by_one, timeout_s=60, what="every service evaluated by exactly one replica")
        split = evaluating(ports, namespace)
        assert {by[0] for by in split.values() if by} == {0, 1}, f"not shared: {split}"

        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        eventually(
            lambda: held(ports[1]) == 4.0,
            timeout_s=90,
            what="the surviving replica to take the dead one's shards",
        )
        eventually(
            lambda: all(by == [0] for by in evaluating(ports[1:], namespace).values()),
            timeout_s=60,
            what="the surviving replica to evaluate every service",
        )
    finally:
        for proc in procs:
            stop_process(proc)
