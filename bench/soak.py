"""Soak: 1,000 LLMServices with autoscaling on, for 30 minutes, on a dev cluster of its own.

The engines are kwok's fake pods (an image the pod runner does not map), one per service on 130
fake 8-GPU H100 nodes; their /metrics are simulated as bench/autoscale_round.py does: a few
local processes bind every engine pod's IP (a loopback address) on port 8000 and answer full
vLLM pages whose counters and histograms grow steadily with time (a page a second). The
operator runs as its own process (`tokenpilot run`, one replica with leader election, so the
audit log names it), scraping every engine each 5 s interval, exactly as deployed.

Every 2 s the soak edits one random service's token budget and times the edit until the
Deployment carries the new flag (reconcile latency, the operator's whole path: watch, plan,
apply). It reports:

- the operator's RSS after every service first turned Ready and at the end (growth < 10 %);
- reconcile latency p50/p99/max;
- the autoscaler's cadence: decisions per service per 5 s interval, from the operator's
  /metrics (tokenpilot_decisions), and its evaluation duration;
- API requests per second: all clients (apiserver_request_total), and the operator's writes
  (the audit log, by user agent);
- a restart at the end (`--restart`, on by default): the operator stopped as an upgrade stops
  it, the memories it wrote to its namespace (docs/autoscaling.md, Restarts) counted and
  sized, and a new operator started: how long until every service's forecast, on the new
  process's /metrics, rests on more load than that process has watched (its memory resumed).

    python bench/soak.py                    # 1,000 services, 30 minutes
    python bench/soak.py --services 50 --minutes 2     # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from autoscale_round import render_pages
from tokenpilot.adapters.kube import KubeClient, connect
from tokenpilot.adapters.kube.apply import apply
from tokenpilot.adapters.kube.autoscaler_memory import LABEL as MEMORY_LABEL
from tokenpilot.adapters.kube.resources import CONFIGMAPS, DEPLOYMENTS, LLMSERVICES
from tokenpilot.adapters.metrics import parse_metrics
from tokenpilot.api.crd import crd
from tokenpilot_lab.devcluster import audit, cluster

NAMESPACE = "soak"
IDENTITY = "soak-operator"
IMAGE = "soak.example/vllm-openai:fake"  # not in the image map: kwok fakes the pod
WORKERS = 4
EVALUATION = "tokenpilot_evaluation_duration_seconds"
GAP = "tokenpilot_evaluation_gap_seconds"
# Creating the services and their pods, and the restart, before and after the soak proper.
SETUP_ALLOWANCE_S = 900.0
# Each engine's /metrics page stands for this many seconds of its load.
PAGE_S = 1.0


def node_pools(services: int) -> dict[str, Any]:
    """Fake 8-GPU H100 nodes for one engine per service and a tenth to spare (130 for 1,000),
    in pools of at most 100 (the dev cluster's limit per pool)."""
    nodes = max(2, -(-services * 11 // 80))
    sizes = [100] * (nodes // 100) + ([nodes % 100] if nodes % 100 else [])
    return {
        "pools": [
            {
                "name": f"h100{chr(ord('a') + index)}",
                "count": count,
                "cpu": "96",
                "memoryGiB": 1024,
                "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 8, "memoryMiB": 81559},
            }
            for index, count in enumerate(sizes)
        ]
    }


def engines(conn: Connection, pages: list[bytes]) -> None:
    """Child process: serves /metrics on every pod IP it is sent, until killed."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first_scraped: dict[str, float] = {}

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            ip = writer.get_extra_info("sockname")[0]
            try:
                while True:
                    line = await reader.readline()
                    if not line:
                        break
                    while (await reader.readline()).strip():
                        pass
                    # The page of this second since the engine's first scrape: its counters
                    # grow with time, as a real engine's do, however often it is read. Past the
                    # last page they hold (an idle engine) rather than reset.
                    since_s = time.monotonic() - first_scraped.setdefault(ip, time.monotonic())
                    body = pages[min(int(since_s / PAGE_S), len(pages) - 1)]
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()

        while True:
            ip = await loop.run_in_executor(None, conn.recv)
            try:
                await asyncio.start_server(handle, ip, 8000)
            except OSError as exc:
                print(f"cannot bind {ip}:8000: {exc}", file=sys.stderr)

    asyncio.run(main())


def service(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "serving.tokenpilot.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": f"svc-{index:04d}", "namespace": NAMESPACE},
        "spec": {
            "model": {
                "name": "llama",
                "source": "hf://meta-llama/Llama-3.1-8B-Instruct",
                "shape": {"preset": "llama-3.1-8b"},
            },
            "engine": {"image": IMAGE},
            "accelerator": {"sku": "auto"},
            "batching": {"maxNumBatchedTokens": 1024, "maxNumSeqs": 64},
            "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 1},
            "replicas": 1,
        },
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def requests_total(client: KubeClient) -> float:
    text = client.text("/metrics")
    return sum(
        s.value for s in parse_metrics(text).series("apiserver_request_total")
    )  # every verb, resource and client


def decisions_by_service(metrics_url: str) -> dict[str, float]:
    page = parse_metrics(httpx.get(metrics_url, timeout=10, trust_env=False).text)
    out: dict[str, float] = {}
    for s in page.series("tokenpilot_decisions_total"):
        out[s.labels["llmservice"]] = out.get(s.labels["llmservice"], 0.0) + s.value
    return out


def histogram(metrics_url: str, name: str) -> dict[float, float]:
    """A histogram of the operator's page: cumulative counts by upper edge, its sum under -1."""
    page = parse_metrics(httpx.get(metrics_url, timeout=10, trust_env=False).text)
    out: dict[float, float] = {-1.0: sum(s.value for s in page.series(f"{name}_sum"))}
    for s in page.series(f"{name}_bucket"):
        edge = float(s.labels["le"])
        out[edge] = out.get(edge, 0.0) + s.value
    return out


def histogram_figures(
    now: dict[float, float], start: dict[float, float] | None = None
) -> dict[str, float | None]:
    """The mean and the P99 (a bucket's upper edge) of what `histogram` counted since `start`."""
    grown = {edge: now[edge] - (start or {}).get(edge, 0.0) for edge in now}
    total = grown.get(float("inf"), 0.0)
    if total <= 0:
        return {"mean": None, "p99": None}
    p99 = next(e for e in sorted(e for e in grown if e >= 0) if grown[e] >= 0.99 * total)
    return {"mean": grown[-1.0] / total, "p99": p99}


def cpu_seconds_by_process() -> dict[str, float]:
    """CPU seconds (user and system) used so far, summed by process name, for the processes
    the soak's figures name: the control plane, the operator and the engines' pages."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        comm = text[text.index("(") + 1 : text.rindex(")")]
        if "tokenpilot.cli run" in cmdline:
            name = "operator"
        elif comm in ("kube-apiserver", "etcd", "kube-controller", "kube-scheduler", "kwok"):
            name = comm
        elif "soak.py" in cmdline:
            name = "soak (engine pages and client)"
        else:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def profile_apiserver(kubeconfig: str, out: Path, after_s: float, seconds: int = 60) -> None:
    """kube-apiserver's own CPU profile over `seconds`, `after_s` from now: which of its work
    the soak's clients cost, by function. Needs the cluster up with `profiling` (its
    /debug/pprof is off in the dev cluster otherwise)."""
    time.sleep(after_s)
    with out.open("wb") as file:
        subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "get", "--raw",
             f"/debug/pprof/profile?seconds={seconds}"],
            stdout=file, check=True, timeout=seconds + 60,
        )  # fmt: skip
    print(f"kube-apiserver CPU profile ({seconds} s) in {out}", flush=True)


def memory_shards(client: KubeClient) -> list[dict[str, Any]]:
    listed = client.request(
        "GET", CONFIGMAPS.path(NAMESPACE), query={"labelSelector": MEMORY_LABEL}
    )
    return list(listed.get("items") or [])


def resumed(metrics_url: str, watched_s: float) -> set[str]:
    """Services whose forecast, on the new process's /metrics, rests on more load than that
    process has watched (`watched_s`): their memory resumed."""
    try:
        page = parse_metrics(httpx.get(metrics_url, timeout=10, trust_env=False).text)
    except httpx.HTTPError:
        return set()  # not listening yet
    return {
        s.labels["llmservice"]
        for s in page.series("tokenpilot_forecast_memory_seconds")
        if s.value > watched_s + 10
    }


def restarted(
    client: KubeClient,
    operator: subprocess.Popen[bytes],
    command: list[str],
    work: Path,
    services: int,
    metrics_url: str,
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """Stop the operator as an upgrade does (SIGTERM), start a new one, and time how soon
    every service resumes the memory the old one wrote."""
    stopping = time.monotonic()
    operator.send_signal(signal.SIGTERM)
    operator.wait(60)
    stop_s = time.monotonic() - stopping
    shards = memory_shards(client)
    keys = sum(len(item.get("data") or {}) for item in shards)
    sizes = [sum(len(v) for v in (item.get("data") or {}).values()) for item in shards]
    started = time.monotonic()
    log = work / "operator-restarted.log"
    operator = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    # A service counts once the new process's forecast rests on more load than it has
    # watched; later its own points follow, and the figure alone no longer tells the two apart.
    seen: set[str] = set()
    waited_s, last_new_s = 0.0, 0.0
    while waited_s < 120 and len(seen) < services:
        time.sleep(5)
        waited_s = time.monotonic() - started
        new = resumed(metrics_url, waited_s) - seen
        if new:
            seen |= new
            last_new_s = waited_s
        print(f"  restarted {waited_s:.0f} s ago: {len(seen)}/{services} resumed", flush=True)
    count, waited_s = len(seen), last_new_s
    return operator, {
        "restart_stop_s": round(stop_s, 1),
        "restart_memory_keys": keys,
        "restart_memory_shards": len(shards),
        "restart_memory_bytes_per_key": round(sum(sizes) / max(keys, 1)),
        "restart_memory_largest_shard_bytes": max(sizes, default=0),
        "restart_resumed": count,
        "restart_resumed_after_s": round(waited_s, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument(
        "--profile-apiserver",
        type=Path,
        metavar="FILE",
        help="write a CPU profile of kube-apiserver, taken over the soak's middle minute, here "
        "(read it with `go tool pprof -top FILE`)",
    )
    parser.add_argument(
        "--restart",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="at the end, restart the operator and time how soon every service resumes its memory",
    )
    parser.add_argument(
        "--queue-up-to",
        type=float,
        default=3.0,
        help="the engines' requests waiting, drawn from 0 to this at each scrape (default 3, "
        "under the target of 4: a steady load; 8 crosses it at random)",
    )
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="tokenpilot-soak-"))
    pools = work / "nodepools.yaml"
    pools.write_text(yaml.safe_dump(node_pools(args.services)))
    state_dir = work / "cluster"
    print(f"dev cluster in {state_dir}", flush=True)
    st = cluster.up(
        cluster.UpOptions(
            name="soak",
            state_dir=state_dir,
            node_pools=pools,
            profiling=args.profile_apiserver is not None,
        )
    )
    operator: subprocess.Popen[bytes] | None = None
    children: list[multiprocessing.Process] = []
    try:
        client = connect(st.kubeconfig)
        apply(client, crd())
        time.sleep(3)
        client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})

        # A steady load: the queue drawn under the target (4 a replica), so no evaluation has
        # a reason to act and the outcome holds (--queue-up-to 8 crosses the target at random),
        # counters that grow alike every second, and a page for every second of the run.
        seconds = int((args.minutes * 60 + SETUP_ALLOWANCE_S) / PAGE_S) + 10
        pages = render_pages(seconds, seed=1, max_waiting=args.queue_up_to, steady=True)
        pipes = []
        for _ in range(WORKERS):
            parent, child = multiprocessing.Pipe()
            proc = multiprocessing.Process(target=engines, args=(child, pages), daemon=True)
            proc.start()
            children.append(proc)
            pipes.append(parent)

        metrics_port = 19100 + os.getpid() % 500
        log = work / "operator.log"
        command = [
            sys.executable, "-m", "tokenpilot.cli", "run", "--kubeconfig", st.kubeconfig,
            "--namespace", NAMESPACE, "--metrics-port", str(metrics_port),
            "--metrics-address", "127.0.0.1",
            "--leader-election-lease", f"{NAMESPACE}/tokenpilot",
            "--leader-election-identity", IDENTITY,
            # As the chart runs it: the operator's namespace, where its memory is kept.
            "--gpu-profiles-configmap", f"{NAMESPACE}/gpu-profiles",
        ]  # fmt: skip
        operator = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"

        created = time.monotonic()
        for index in range(args.services):
            client.request("POST", LLMSERVICES.path(NAMESPACE), body=service(index))
        print(f"{args.services} services created in {time.monotonic() - created:.0f} s", flush=True)

        bound: set[str] = set()

        def bind_new_pods() -> int:
            pods = client.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
            for pod in pods:
                ip = (pod.get("status") or {}).get("podIP")
                if ip and ip not in bound:
                    pipes[len(bound) % WORKERS].send(ip)
                    bound.add(ip)
            return len(pods)

        def all_ready() -> int:
            items = client.request("GET", LLMSERVICES.path(NAMESPACE))["items"]
            return sum((i.get("status") or {}).get("phase") == "Ready" for i in items)

        while True:
            bind_new_pods()
            ready = all_ready()
            if ready == args.services:
                break
            print(f"  {ready}/{args.services} Ready", flush=True)
            time.sleep(10)
        all_ready_s = time.monotonic() - created
        print(f"all {args.services} Ready after {all_ready_s:.0f} s", flush=True)

        rss_start = rss_mib(operator.pid)
        requests_start = requests_total(client)
        by_service_start = decisions_by_service(metrics_url)
        gaps_start = histogram(metrics_url, GAP)
        cpu_start = cpu_seconds_by_process()
        soak_start = time.monotonic()
        started_wall = time.time()

        latencies: list[float] = []
        rng = random.Random(7)
        deadline = soak_start + args.minutes * 60
        stopping = threading.Event()

        def rebind() -> None:
            while not stopping.wait(15):
                bind_new_pods()

        threading.Thread(target=rebind, daemon=True).start()
        if args.profile_apiserver is not None:
            threading.Thread(
                target=profile_apiserver,
                args=(st.kubeconfig, args.profile_apiserver, max(0.0, args.minutes * 30 - 30)),
                daemon=True,
            ).start()
        budget = 1024
        while time.monotonic() < deadline:
            name = f"svc-{rng.randrange(args.services):04d}"
            budget = 2048 if budget == 1024 else 1024
            sent = time.monotonic()
            client.request(
                "PATCH", LLMSERVICES.path(NAMESPACE, name),
                body={"spec": {"batching": {"maxNumBatchedTokens": budget}}},
                content_type="application/merge-patch+json",
            )  # fmt: skip
            while time.monotonic() - sent < 60:
                args_ = DEPLOYMENTS.path(NAMESPACE, name)
                container = client.request("GET", args_)["spec"]["template"]["spec"]
                flags = container["containers"][0]["args"]
                if flags[flags.index("--max-num-batched-tokens") + 1] == str(budget):
                    break
                time.sleep(0.05)
            latencies.append(time.monotonic() - sent)
            time.sleep(max(0.0, 2.0 - (time.monotonic() - sent)))
            if len(latencies) % 150 == 0:
                print(
                    f"  {(time.monotonic() - soak_start) / 60:.1f} min: RSS "
                    f"{rss_mib(operator.pid):.0f} MiB, reconcile p99 so far "
                    f"{statistics.quantiles(latencies, n=100, method='inclusive')[98]:.2f} s",
                    flush=True,
                )
        stopping.set()
        elapsed = time.monotonic() - soak_start
        rss_end = rss_mib(operator.pid)
        requests_rate = (requests_total(client) - requests_start) / elapsed
        gaps = histogram_figures(histogram(metrics_url, GAP), gaps_start)
        by_service = decisions_by_service(metrics_url)
        decided = sum(by_service.values()) - sum(by_service_start.values())
        # Each service's own mean cadence over the soak; the P99 across services.
        per_service_s = sorted(
            elapsed / max(by_service.get(name, 0.0) - by_service_start.get(name, 0.0), 1.0)
            for name in (f"svc-{index:04d}" for index in range(args.services))
        )
        cpu_end = cpu_seconds_by_process()
        writes = [
            w
            for w in audit.read(state_dir)
            if w.user_agent == f"tokenpilot/{IDENTITY}" and w.received.timestamp() >= started_wall
        ]
        figures = {
            "services": args.services,
            "minutes": round(elapsed / 60, 1),
            "all_ready_s": round(all_ready_s, 1),
            "operator_rss_start_mib": round(rss_start, 1),
            "operator_rss_end_mib": round(rss_end, 1),
            "rss_growth_pct": round(100 * (rss_end - rss_start) / rss_start, 1),
            "reconcile_edits": len(latencies),
            "reconcile_p50_s": round(statistics.median(latencies), 2),
            "reconcile_p99_s": round(
                statistics.quantiles(latencies, n=100, method="inclusive")[98], 2
            ),
            "reconcile_max_s": round(max(latencies), 2),
            "decisions_per_service_per_interval": round(
                decided / args.services / (elapsed / 5.0), 3
            ),
            "mean_evaluation_cadence_s": round(args.services * elapsed / max(decided, 1), 2),
            "evaluation_p99_s": histogram_figures(histogram(metrics_url, EVALUATION))["p99"],
            "evaluation_gap_mean_s": None if gaps["mean"] is None else round(gaps["mean"], 2),
            "evaluation_gap_p99_s": gaps["p99"],
            "per_service_cadence_p99_s": round(
                statistics.quantiles(per_service_s, n=100, method="inclusive")[98], 2
            ),
            "queue_up_to": args.queue_up_to,
            "cpu_cores_by_process": {
                name: round((cpu_end[name] - cpu_start.get(name, 0.0)) / elapsed, 2)
                for name in sorted(cpu_end)
            },
            "api_requests_per_s_all_clients": round(requests_rate, 1),
            "operator_writes_per_s": round(len(writes) / elapsed, 2),
            "operator_writes_by_kind": {
                what: n for _w, what, n in audit.table(writes, {f"tokenpilot/{IDENTITY}": "op"})
            },
            "operator_alive": operator.poll() is None,
            "tracebacks_in_operator_log": log.read_text(errors="replace").count("Traceback"),
            "evaluations_over_their_time_limit": log.read_text(errors="replace").count(
                "evaluation took over"
            ),
        }
        if args.restart:
            operator, restart = restarted(
                client, operator, command, work, args.services, metrics_url
            )
            figures.update(restart)
        print(json.dumps(figures, indent=2), flush=True)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
    finally:
        if operator is not None and operator.poll() is None:
            operator.send_signal(signal.SIGTERM)
            try:
                operator.wait(30)
            except subprocess.TimeoutExpired:
                operator.kill()
        for proc in children:
            proc.kill()
        cluster.down(state_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
