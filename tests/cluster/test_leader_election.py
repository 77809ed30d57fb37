"""Two operator replicas on one Lease: one acts, the other takes over when the first dies or
is paused past its lease, and the API server's audit log shows their writes never overlap.
Both serve /metrics throughout (a Service in front of them reaches either), saying which leads.

The replicas run with the chart's timing (15 s lease, 10 s renew deadline, 2 s retry), so the
bound checked here is the one docs/reliability.md states for a real cluster:
lease 15 s + 2 x retry 2 s + start-up and first reconcile (budget 15 s) = 34 s.
"""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from _operator_harness import (
    args_of,
    client_for,
    create,
    elected_operator,
    flag,
    get_deployment,
    get_llms,
    install_crd,
    lease_holder,
    metrics_ports,
    sample,
    stop_process,
)

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.lease import LEASE_LOST_EXIT
from tokenpilot.adapters.kube.resources import LLMSERVICES
from tokenpilot.core.lease import LeaseTiming
from tokenpilot_lab.devcluster import audit
from tokenpilot_lab.devcluster.pytest_plugin import DevCluster, eventually

pytestmark = pytest.mark.cluster

TIMING = LeaseTiming()  # what the chart runs with
START_UP_BUDGET_S = 15.0
TAKEOVER_BOUND_S = TIMING.takeover_bound_s(START_UP_BUDGET_S)
SERVICE = "ha"


def _service(client: KubeClient, namespace: str) -> None:
    body = sample("llama-3.1-8b-h100.yaml", namespace, replicas=1)
    body["metadata"]["name"] = SERVICE
    body["spec"]["batching"]["maxNumBatchedTokens"] = 1024
    body["spec"]["batching"]["maxNumSeqs"] = 64
    body["spec"]["autoscaling"].update(minReplicas=1, maxReplicas=3, interval="1s")
    create(client, body)


def _budget(client: KubeClient, namespace: str) -> str | None:
    deployment = get_deployment(client, namespace, SERVICE)
    return flag(args_of(deployment), "--max-num-batched-tokens") if deployment else None


def _ready(client: KubeClient, namespace: str) -> bool:
    return get_llms(client, namespace, SERVICE).get("status", {}).get("phase") == "Ready"


def _edit(client: KubeClient, namespace: str, budget: int, min_replicas: int) -> None:
    client.request(
        "PATCH",
        LLMSERVICES.path(namespace, SERVICE),
        body={
            "spec": {
                "batching": {"maxNumBatchedTokens": budget},
                "autoscaling": {"minReplicas": min_replicas},
            }
        },
        content_type="application/merge-patch+json",
    )


def _two_replicas(
    kubeconfig: Path, namespace: str, tmp_path: Path, metrics_ports: tuple[int, int] | None = None
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """Replica a leads (started first and waited for), b stands by."""
    port_a, port_b = (
        (("--metrics-port", str(p)) for p in metrics_ports) if metrics_ports else ((), ())
    )
    a = elected_operator(kubeconfig, namespace, tmp_path / "a.log", "op-a", *port_a)
    client = client_for(kubeconfig)
    eventually(lambda: lease_holder(client, namespace) == "op-a", timeout_s=60, what="a to lead")
    b = elected_operator(kubeconfig, namespace, tmp_path / "b.log", "op-b", *port_b)
    return a, b


def _leader_gauge(port: int) -> float | None:
    """`tokenpilot_leader` from the replica's /metrics; None while it does not answer."""
    try:
        page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).text
    except httpx.HTTPError:
        return None
    values = [
        line.split()[1] for line in page.splitlines() if line.startswith("tokenpilot_leader ")
    ]
    return float(values[0]) if values else None


def _writers(namespace: str) -> dict[str, str]:
    return {"tokenpilot/op-a": "op-a", "tokenpilot/op-b": "op-b"}


def _in(namespace: str, writes: list[audit.Write]) -> list[audit.Write]:
    return [w for w in writes if w.namespace == namespace]


def _renewed_twice(client: KubeClient, namespace: str) -> None:
    """Wait until the Lease's renewTime has moved twice."""
    seen: list[str] = []

    def renewed() -> bool:
        lease = client.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/tokenpilot")
        renew = str(((lease or {}).get("spec") or {}).get("renewTime") or "")
        if not seen or seen[-1] != renew:
            seen.append(renew)
        return len(seen) >= 3

    eventually(renewed, timeout_s=10 * TIMING.retry_period_s, what="two renewals of the Lease")


def _after_a_exited(client: KubeClient, namespace: str, state_dir: Path) -> None:
    """Write a marker ConfigMap and wait until the audit log holds it."""
    marker = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a-exited"}}
    client.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body=marker)
    eventually(
        lambda: any(
            w.resource == "configmaps" and w.name == "a-exited" and w.verb == "create"
            for w in _in(namespace, audit.read(state_dir))
        ),
        timeout_s=30,
        what="the marker written after a exited in the audit log",
    )


def test_sigkill_of_the_leader_hands_over_within_the_bound_without_overlap(
    dev_cluster: DevCluster, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    assert dev_cluster.state_dir is not None, "needs the dev cluster's audit log"
    client = client_for(kubeconfig)
    install_crd(client)
    port_a, port_b = metrics_ports(2)
    ports = (port_a, port_b)
    a, b = _two_replicas(kubeconfig, namespace, tmp_path, metrics_ports=ports)
    try:
        _service(client, namespace)
        eventually(lambda: _ready(client, namespace), timeout_s=90, what="the service Ready")
        assert lease_holder(client, namespace) == "op-a"
        assert _leader_gauge(ports[0]) == 1.0
        # The standby answers too: a Service that picks it gets a page, not a refusal.
        eventually(
            lambda: _leader_gauge(ports[1]) == 0.0, timeout_s=30, what="b's /metrics, leader 0"
        )
        _renewed_twice(client, namespace)  # b, retrying, has seen a renew or two

        a.send_signal(signal.SIGKILL)
        a.wait(10)
        killed = time.monotonic()
        _edit(client, namespace, budget=2048, min_replicas=2)

        def edit_carried_out() -> bool:
            scale = client.request("GET", LLMSERVICES.path(namespace, SERVICE) + "/scale")
            return _budget(client, namespace) == "2048" and scale["spec"]["replicas"] >= 2

        eventually(
            edit_carried_out,
            timeout_s=TAKEOVER_BOUND_S,
            what=f"b to reconcile and autoscale the edit within {TAKEOVER_BOUND_S:.0f} s",
        )
        took_s = time.monotonic() - killed
        print(f"takeover: edit after SIGKILL carried out in {took_s:.1f} s")
        assert lease_holder(client, namespace) == "op-b"
        eventually(lambda: _ready(client, namespace), timeout_s=90, what="Ready under b")
        assert _leader_gauge(ports[1]) == 1.0
    finally:
        stop_process(b)
        stop_process(a)

    writes = _in(namespace, audit.read(dev_cluster.state_dir))
    rows = audit.table(writes, _writers(namespace))
    print("writer, field manager or verb, count:", *rows, sep="\n  ")
    managers = {(w, what) for w, what, _n in rows}
    # Both replicas did real work: a reconciled first, b reconciled and autoscaled after.
    assert ("op-a", "tokenpilot") in managers
    assert ("op-b", "tokenpilot") in managers
    assert ("op-b", "tokenpilot-autoscaler") in managers
    spans = audit.spans(writes, _writers(namespace))
    print("spans:", *spans, sep="\n  ")
    assert audit.overlaps(spans) == []


def test_a_leader_paused_past_its_lease_does_not_write_when_it_wakes(
    dev_cluster: DevCluster, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    assert dev_cluster.state_dir is not None, "needs the dev cluster's audit log"
    client = client_for(kubeconfig)
    install_crd(client)
    a, b = _two_replicas(kubeconfig, namespace, tmp_path)
    try:
        _service(client, namespace)
        eventually(lambda: _ready(client, namespace), timeout_s=90, what="the service Ready")

        a.send_signal(signal.SIGSTOP)
        paused_at = datetime.now(UTC)
        eventually(
            lambda: lease_holder(client, namespace) == "op-b",
            timeout_s=TIMING.takeover_bound_s(0) + 10,
            what="b to take the Lease from the paused a",
        )
        # Work that a, waking, would want to do: its watch has the edit queued up.
        _edit(client, namespace, budget=4096, min_replicas=1)
        eventually(lambda: _budget(client, namespace) == "4096", timeout_s=30, what="b acts")

        a.send_signal(signal.SIGCONT)
        assert a.wait(60) == LEASE_LOST_EXIT, "a woke, saw its fence closed and exited"
        # Anything a sent on waking reached the server before it exited: once a write sent
        # after that is in the audit log, so is everything of a's.
        _after_a_exited(client, namespace, dev_cluster.state_dir)
    finally:
        a.send_signal(signal.SIGCONT)
        stop_process(b)
        stop_process(a)

    late = [
        w
        for w in _in(namespace, audit.read(dev_cluster.state_dir))
        if w.user_agent == "tokenpilot/op-a" and w.received >= paused_at
    ]
    assert late == [], f"a wrote after it was paused: {late}"
    assert "stopped leading" in (tmp_path / "a.log").read_text()
