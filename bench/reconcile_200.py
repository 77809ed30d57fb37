"""Benchmark: 200 LLMServices created at once against a real API server.

Reports the time from each create to its Deployment being present (p50, p99, max), the time
until every service reports a phase, the API writes of idle resyncs (counted by the API server),
and the operator's resident memory. The operator runs as its own process (`tokenpilot run`),
exactly as deployed, so its RSS is its own.

Services ask for 0 replicas: the numbers are the reconciler's, not the scheduler's or the
fake kubelet's (a 20-GPU dev cluster could not place 200 engines anyway).

    python bench/reconcile_200.py                       # a throwaway dev cluster
    python bench/reconcile_200.py --kubeconfig PATH     # an existing cluster
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tokenpilot.adapters.kube import KubeClient, connect
from tokenpilot.adapters.kube.apiserver_metrics import api_writes, write_delta
from tokenpilot.adapters.kube.apply import apply
from tokenpilot.adapters.kube.events import COMPONENT
from tokenpilot.adapters.kube.resources import DEPLOYMENTS, LLMSERVICES
from tokenpilot.api.crd import crd

RENDERED = ("deployments", "services", "poddisruptionbudgets", "servicemonitors")


def operator_writes(client: KubeClient) -> dict[tuple[str, str, str], float]:
    """The operator's write paths as the API server counts them: server-side apply of what it
    renders and any write to LLMServices (status, kopf's annotations). Controllers' own writes
    (Deployment status) are not the operator's and are left out."""
    applied = api_writes(client, RENDERED, ("APPLY",))
    return {**applied, **api_writes(client, ("llmservices",), ("APPLY", "PATCH", "POST", "PUT"))}


NAMESPACE = "bench-reconcile"


def service(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "serving.tokenpilot.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": f"svc-{index:03d}", "namespace": NAMESPACE},
        "spec": {
            "model": {
                "name": f"model-{index:03d}",
                "source": "hf://meta-llama/Llama-3.1-8B-Instruct",
                "shape": {"preset": "llama-3.1-8b"},
            },
            "accelerator": {"sku": "auto" if index % 2 else "H100-80GB"},
            "slo": {"itlP99": "50ms", "ttftP99": "2s"},
            "replicas": 0,
        },
    }


def our_events(client: KubeClient) -> int:
    items = client.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events").get("items", [])
    return sum(1 for e in items if e.get("reportingComponent") == COMPONENT)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_for(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def watch_deployments(client: KubeClient, seen: dict[str, float], stop: threading.Event) -> None:
    """Record when each Deployment is first listed (polling every 50 ms)."""
    while not stop.is_set():
        items = client.request("GET", DEPLOYMENTS.path(NAMESPACE)).get("items", [])
        now = time.monotonic()
        for item in items:
            seen.setdefault(item["metadata"]["name"], now)
        stop.wait(0.05)


def install(client: KubeClient) -> None:
    apply(client, crd())
    wait_for(lambda: client.get(LLMSERVICES.path("default")) is not None, 60, "the CRD")
    if client.get(f"/api/v1/namespaces/{NAMESPACE}") is None:
        client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})


def run(kubeconfig: Path, count: int, resync_s: float, log: Path) -> dict[str, Any]:
    client = connect(str(kubeconfig))
    install(client)
    operator = subprocess.Popen(
        [sys.executable, "-m", "tokenpilot.cli", "run", "--kubeconfig", str(kubeconfig),
         "--namespace", NAMESPACE, "--resync-interval", str(resync_s)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        time.sleep(3)  # kopf's start-up: login, CRD scan, first (empty) list
        seen: dict[str, float] = {}
        stop = threading.Event()
        watcher = threading.Thread(
            target=watch_deployments, args=(connect(str(kubeconfig)), seen, stop)
        )
        watcher.start()
        created: dict[str, float] = {}
        start = time.monotonic()
        for index in range(count):
            body = service(index)
            created[body["metadata"]["name"]] = time.monotonic()
            client.request("POST", LLMSERVICES.path(NAMESPACE), body=body)
        create_s = time.monotonic() - start
        wait_for(lambda: len(seen) >= count, 300, f"{count} Deployments")
        stop.set()
        watcher.join()
        latencies = sorted(seen[name] - t for name, t in created.items())

        def all_phased() -> bool:
            items = client.request("GET", LLMSERVICES.path(NAMESPACE)).get("items", [])
            return sum(1 for i in items if i.get("status", {}).get("phase") == "Ready") >= count

        wait_for(all_phased, 300, "every service Ready")
        all_ready_s = time.monotonic() - start
        rss_busy = rss_mib(operator.pid)

        time.sleep(resync_s)  # let the last status writes land
        before, events_before = operator_writes(client), our_events(client)
        idle_passes = 3
        time.sleep(idle_passes * resync_s + 1)
        idle = write_delta(before, operator_writes(client))
        new_events = our_events(client) - events_before
        if new_events:
            idle[("POST", "events", "")] = float(new_events)
        return {
            "services": count,
            "create_loop_s": round(create_s, 2),
            "create_to_deployment_s": {
                "p50": round(statistics.median(latencies), 3),
                "p99": round(latencies[int(0.99 * (len(latencies) - 1))], 3),
                "max": round(latencies[-1], 3),
            },
            "all_ready_s": round(all_ready_s, 2),
            "idle_resync_passes": idle_passes,
            "resync_interval_s": resync_s,
            "idle_writes": sum(idle.values()),
            "idle_writes_by_kind": {"/".join(k): v for k, v in idle.items()},
            "operator_rss_mib": {"after_create": round(rss_busy, 1),
                                 "after_idle": round(rss_mib(operator.pid), 1)},
        }  # fmt: skip
    finally:
        operator.send_signal(signal.SIGTERM)
        try:
            operator.wait(30)
        except subprocess.TimeoutExpired:
            operator.kill()
        client.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster (default: start one)")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--resync-interval", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    log = Path(tempfile.mkdtemp(prefix="reconcile-bench-")) / "operator.log"
    if args.kubeconfig:
        result = run(args.kubeconfig, args.count, args.resync_interval, log)
    else:
        from tokenpilot_lab.devcluster import cluster, paths

        name = f"bench-{os.getpid()}"
        state_dir = paths.default_state_dir(name)
        st = cluster.up(cluster.UpOptions(name=name, state_dir=state_dir))
        try:
            result = run(Path(st.kubeconfig), args.count, args.resync_interval, log)
        finally:
            cluster.down(state_dir)
    result["operator_log"] = str(log)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        lat = result["create_to_deployment_s"]
        print(f"{result['services']} LLMServices created in {result['create_loop_s']} s")
        print(f"create -> Deployment: p50 {lat['p50']} s, p99 {lat['p99']} s, max {lat['max']} s")
        print(f"all Ready after {result['all_ready_s']} s")
        print(f"API writes in {result['idle_resync_passes']} idle resyncs: {result['idle_writes']}")
        rss = result["operator_rss_mib"]
        print(f"operator RSS: {rss['after_create']} MiB after create, {rss['after_idle']} MiB idle")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
