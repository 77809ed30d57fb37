"""Benchmark: one autoscaler evaluation round over many services with the direct source.

A round is what the operator does every interval: for every service, scrape each of its ready
engine pods' /metrics concurrently, parse the pages, compute the window P99s and step the
autoscaler's state machine (decide, the Event, the status). The
engines are served from a few local processes on 127.0.0.1, one port per engine, each answering
a full vLLM /metrics page (every family in tokenpilot.core.vllm_metrics) whose counters and
histograms grow from one scrape to the next. Pages are rendered before the clock starts, so the
servers cost little and the measured process is the operator side alone.

    python bench/autoscale_round.py                  # 200 services x 4 engines, 10 rounds
    python bench/autoscale_round.py --json           # the same, one JSON object

Reports wall time per round (target: under 2 s for 200 services / 800 engines), CPU seconds the
evaluating process used per round, and its resident memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import resource
import statistics
import sys
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tokenpilot.adapters.metrics import DirectSource, PodEndpoint, ServiceTarget
from tokenpilot.core import vllm_metrics
from tokenpilot.core.autoscale import AutoscalePolicy
from tokenpilot.core.autoscale.loop import Current, Now, ServiceState, step

# The status' wall-clock text; the benchmark times the loop, not the clock.
WALL = "2026-01-01T00:00:00Z"

MAX_MODEL_LEN = 8192


def render_pages(
    num_pages: int, seed: int, max_waiting: float = 8.0, steady: bool = False
) -> list[bytes]:
    """Successive /metrics pages of one busy engine, as vLLM renders them; each gauge drawn
    from 0 to 8 (the requests waiting from 0 to `max_waiting`). Each counter grows by 100 to
    2,000 a page, or, `steady`, by 1,000 within 2 % (an engine whose load holds)."""
    rng = random.Random(seed)
    registry = CollectorRegistry()
    labels = {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}
    metrics: dict[str, object] = {}
    for family in vllm_metrics.FAMILIES:
        names = list(family.label_names)
        if family.type is vllm_metrics.MetricType.gauge:
            metrics[family.name] = Gauge(
                family.name, family.documentation, names, registry=registry
            )
        elif family.type is vllm_metrics.MetricType.counter:
            metrics[family.name] = Counter(
                family.name, family.documentation, names, registry=registry
            )
        else:
            metrics[family.name] = Histogram(
                family.name,
                family.documentation,
                names,
                buckets=family.bucket_edges(MAX_MODEL_LEN),
                registry=registry,
            )
    pages = []
    for _ in range(num_pages):
        for family in vllm_metrics.FAMILIES:
            metric = metrics[family.name]
            values = {name: labels.get(name, "stop") for name in family.label_names}
            child = metric.labels(**values)  # type: ignore[attr-defined]
            if family.name == vllm_metrics.NUM_REQUESTS_WAITING:
                child.set(rng.uniform(0, max_waiting))
            elif family.type is vllm_metrics.MetricType.gauge:
                child.set(rng.uniform(0, 8))
            elif family.type is vllm_metrics.MetricType.counter:
                child.inc(1000 * rng.uniform(0.98, 1.02) if steady else rng.randint(100, 2000))
            else:
                top = family.bucket_edges(MAX_MODEL_LEN)[-1]
                for _ in range(200):
                    child.observe(rng.lognormvariate(-3.5, 0.5) * top / 10)
        pages.append(generate_latest(registry))
    return pages


def serve(num_ports: int, pages: list[bytes], conn: multiprocessing.connection.Connection) -> None:
    """Child process: `num_ports` engines on 127.0.0.1; sends their ports, serves until killed."""

    async def main() -> None:
        ports = []

        def handler_for() -> object:
            served = [0]

            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                try:
                    while True:
                        request = await reader.readuntil(b"\r\n\r\n")
                        if not request:
                            break
                        body = pages[min(served[0], len(pages) - 1)]
                        served[0] += 1
                        writer.write(
                            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                            + f"Content-Length: {len(body)}\r\n\r\n".encode()
                            + body
                        )
                        await writer.drain()
                except (asyncio.IncompleteReadError, ConnectionError):
                    pass
                finally:
                    writer.close()

            return handle

        servers = []
        for _ in range(num_ports):
            server = await asyncio.start_server(handler_for(), "127.0.0.1", 0)  # type: ignore[arg-type]
            servers.append(server)
            ports.append(server.sockets[0].getsockname()[1])
        conn.send(ports)
        await asyncio.Event().wait()

    asyncio.run(main())


@dataclass
class Round:
    wall_s: float
    cpu_s: float
    num_scraped: int
    num_problems: int


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def evaluate(args: argparse.Namespace, ports: list[int]) -> list[Round]:
    policy = AutoscalePolicy(
        min_replicas=1,
        max_replicas=8,
        itl_p99_slo_s=0.05,
        ttft_p99_slo_s=2.0 if args.ttft_slo else None,
    )
    targets = []
    for index in range(args.services):
        chunk = ports[index * args.pods_per_service : (index + 1) * args.pods_per_service]
        pods = tuple(
            PodEndpoint(f"svc{index}-{i}", f"http://127.0.0.1:{port}/metrics")
            for i, port in enumerate(chunk)
        )
        targets.append(
            ServiceTarget(
                "bench", f"svc{index}", len(pods), len(pods), pods, read_ttft=args.ttft_slo
            )
        )
    states = [ServiceState(policy) for _ in targets]
    source = DirectSource(timeout_s=args.timeout, max_in_flight=args.max_in_flight)
    rounds = []
    loop = asyncio.get_running_loop()
    try:
        for _ in range(args.rounds):
            started_s, cpu_started_s = time.perf_counter(), time.process_time()
            now_s = loop.time()

            async def one(index: int, now_s: float = now_s) -> tuple[int, int]:
                target = targets[index]
                scrapes = await source.read(target, now_s)
                current = Current(target.spec_replicas, target.ready_replicas)
                states[index], _, _ = step(states[index], scrapes, current, Now(now_s, WALL))
                return len(scrapes.samples), len(scrapes.problems)

            results = await asyncio.gather(*(one(i) for i in range(len(targets))))
            wall_s = time.perf_counter() - started_s
            rounds.append(
                Round(
                    wall_s,
                    time.process_time() - cpu_started_s,
                    sum(r[0] for r in results),
                    sum(r[1] for r in results),
                )
            )
            await asyncio.sleep(max(0.0, args.interval - wall_s))
    finally:
        await source.aclose()
    return rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--pods-per-service", type=int, default=4)
    parser.add_argument("--processes", type=int, default=4, help="engine-serving processes")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between rounds")
    parser.add_argument("--timeout", type=float, default=2.0, help="scrape timeout, seconds")
    parser.add_argument("--max-in-flight", type=int, default=128)
    parser.add_argument(
        "--ttft-slo", action="store_true", help="services also have a TTFT SLO (read TTFT too)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    num_engines = args.services * args.pods_per_service
    pages = render_pages(args.rounds + 2, seed=1)
    children, ports = [], []
    per_process = -(-num_engines // args.processes)
    context = multiprocessing.get_context("fork")
    try:
        for start in range(0, num_engines, per_process):
            parent_end, child_end = context.Pipe()
            count = min(per_process, num_engines - start)
            child = context.Process(target=serve, args=(count, pages, child_end), daemon=True)
            child.start()
            children.append(child)
            if not parent_end.poll(30):
                raise SystemExit("an engine-serving process did not report its ports in 30 s")
            ports += parent_end.recv()
        rss_before_mib = rss_mib()
        rounds = asyncio.run(evaluate(args, ports))
    finally:
        for child in children:
            child.terminate()
            child.join(10)

    walls = [r.wall_s for r in rounds]
    # The first round opens every connection; later rounds reuse them, as the operator does.
    steady = walls[1:] or walls
    report = {
        "services": args.services,
        "ttft_slo": args.ttft_slo,
        "engines": num_engines,
        "page_bytes": len(pages[0]),
        "rounds": len(rounds),
        "first_round_s": round(walls[0], 3),
        "round_p50_s": round(statistics.median(steady), 3),
        "round_max_s": round(max(steady), 3),
        "cpu_s_per_round": round(statistics.mean(r.cpu_s for r in rounds[1:] or rounds), 3),
        "engines_scraped_last_round": rounds[-1].num_scraped,
        "problems_last_round": rounds[-1].num_problems,
        "rss_mib_before": round(rss_before_mib, 1),
        "rss_mib_peak": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "target_round_s": 2.0,
    }
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:28s} {value}")
    ok = report["round_max_s"] < 2.0 and report["engines_scraped_last_round"] == num_engines
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
