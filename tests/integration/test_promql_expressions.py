"""Every PromQL expression in the dashboards and rules, run against a real Prometheus that has
scraped engine simulators under load: each must parse and each must return data.

The test starts Debian's `prometheus` on a free 127.0.0.1 port with a static scrape config (the
engines' series get `namespace` and `llmservice` target labels, as the in-cluster scrape
config gives them by relabelling), the generated rule file with its group interval shortened
to a few seconds, three `tokenpilot engine-sim` processes for two services, the operator's own
metrics for three services, and a small streaming load. The services are chosen so that every
alert's condition is true somewhere, which is the only way an alert expression returns data:

- shop/chat: targets no engine can meet (ITL 1 ms, TTFT 0.1 ms at 99.99%), desired replicas at
  the maximum, reconcile errors: both burn-rate pairs, at-max and reconcile-error conditions;
- shop/code: lenient targets; the healthy control;
- shop/ghost: the operator wants a replica but no engine reports: metrics missing.

Run time is dominated by the load phase: TOKENPILOT_PROMQL_LOAD_S (default 30 s; every window
an expression reads needs two scrapes in it, and the scrape is every second: 15 s passed too).
After it, each expression is asked again for up to `SETTLE_S` until every one returns data.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from operator_view import OperatorService, serve_operator_metrics

from tokenpilot.core.dashboards.boards import all_dashboards
from tokenpilot.core.dashboards.files import RULES_PATH, generated_files
from tokenpilot.core.dashboards.grafana import expressions
from tokenpilot_lab.devcluster.ports import free_port
from tokenpilot_lab.prometheus_server import running_prometheus

pytestmark = pytest.mark.prometheus

LOAD_S = float(os.environ.get("TOKENPILOT_PROMQL_LOAD_S", "30"))
# The last scrapes and rule evaluations after the load (scrape 1 s, rules every 2 s).
SETTLE_S = 30.0
NAMESPACE = "shop"
# Grafana variables as "All" would expand them.
VARIABLES = {"$namespace": ".+", "$llmservice": ".+", "$__rate_interval": "1m"}


@dataclass(frozen=True)
class Engine:
    llmservice: str
    port: int


ENGINES_PER_SERVICE = {"chat": 2, "code": 1}
# chat runs on the slower L40S so its inter-token latency is well above the 10 ms bucket edge.
GPU = {"chat": "L40S", "code": "H100-80GB"}
OPERATOR_VIEW = (
    OperatorService(
        "chat",
        itl_p99_s=0.001,
        ttft_p99_s=0.0001,
        attainment=0.9999,
        desired=2,
        ready=2,
        max_replicas=2,
        reconcile_errors=True,
        engine_step_pace=1.4,
    ),
    OperatorService(
        "code",
        itl_p99_s=0.2,
        ttft_p99_s=5.0,
        attainment=0.99,
        desired=1,
        ready=1,
        max_replicas=4,
        reconcile_errors=False,
        engine_step_pace=0.97,
    ),
    OperatorService(
        "ghost",
        itl_p99_s=0.05,
        ttft_p99_s=2.0,
        attainment=0.99,
        desired=1,
        ready=0,
        max_replicas=4,
        reconcile_errors=False,
    ),
)


def wait_until(check, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.5)


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[list[Engine]]:
    started: list[tuple[subprocess.Popen[bytes], Engine]] = []
    try:
        for service, count in ENGINES_PER_SERVICE.items():
            for index in range(count):
                engine = Engine(service, free_port())
                log = open(tmp_path / f"engine-{service}-{index}.log", "wb")  # noqa: SIM115
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tokenpilot.cli",
                        "engine-sim",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(engine.port),
                        "--served-model-name",
                        service,
                        "--gpu",
                        GPU[service],
                        "--max-num-batched-tokens",
                        "2048",
                        "--max-num-seqs",
                        "64",
                        "--time-scale",
                        "1",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
                started.append((process, engine))
        for process, engine in started:

            def healthy(process=process, engine=engine) -> bool:  # type: ignore[no-untyped-def]
                if process.poll() is not None:
                    pytest.fail(f"engine-sim on port {engine.port} exited; see {tmp_path}")
                return http_ok(f"http://127.0.0.1:{engine.port}/health")

            wait_until(healthy, 60, f"engine-sim on port {engine.port}")
        yield [engine for _, engine in started]
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@pytest.fixture
def operator_metrics_port() -> Iterator[int]:
    stop = threading.Event()
    port = free_port()
    thread = threading.Thread(
        target=serve_operator_metrics, args=(NAMESPACE, OPERATOR_VIEW, port, stop), daemon=True
    )
    thread.start()
    wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/metrics"), 10, "operator metrics")
    yield port
    stop.set()
    thread.join(timeout=10)


@pytest.fixture
def prometheus(tmp_path: Path, engines: list[Engine], operator_metrics_port: int) -> Iterator[str]:
    rules = yaml.safe_load(generated_files()[RULES_PATH])
    for group in rules["groups"]:
        group["interval"] = "2s"  # production evaluates every 30 s; the test cannot wait that long
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    engine_configs = [
        {
            "targets": [f"127.0.0.1:{e.port}" for e in engines if e.llmservice == service],
            "labels": {"namespace": NAMESPACE, "llmservice": service},
        }
        for service in ENGINES_PER_SERVICE
    ]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "2s"},
        "rule_files": [str(tmp_path / "rules.yaml")],
        "scrape_configs": [
            {"job_name": "engines", "static_configs": engine_configs},
            # As the chart's ServiceMonitor: keep the operator's namespace/llmservice labels.
            {
                "job_name": "operator",
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{operator_metrics_port}"]}],
            },
        ],
    }
    with running_prometheus(config, tmp_path / "prometheus") as url:
        yield url


async def drive_load(engines: list[Engine], duration_s: float) -> int:
    """Streaming completions, four clients per engine, until the time is up."""
    deadline = time.monotonic() + duration_s
    done = 0

    async def client(http: httpx.AsyncClient, engine: Engine, seed: int) -> None:
        nonlocal done
        body = {
            "model": engine.llmservice,
            "prompt": "tell me a story " * (20 + seed * 30),
            "max_tokens": 48,
            "stream": True,
        }
        while time.monotonic() < deadline:
            url = f"http://127.0.0.1:{engine.port}/v1/completions"
            async with http.stream("POST", url, json=body, timeout=60) as response:
                response.raise_for_status()
                async for _ in response.aiter_lines():
                    pass
            done += 1

    async with httpx.AsyncClient(trust_env=False) as http:
        await asyncio.gather(*(client(http, e, s) for e in engines for s in range(4)))
    return done


def query(url: str, expression: str) -> tuple[str, int]:
    response = httpx.get(
        f"{url}/api/v1/query", params={"query": expression}, timeout=30, trust_env=False
    )
    body = response.json()
    if body.get("status") != "success":
        return f"error: {body.get('error')}", 0
    return "ok", len(body["data"]["result"])


def all_expressions() -> list[tuple[str, str]]:
    found = []
    for stem, board in all_dashboards().items():
        for expression in expressions(board):
            for variable, value in VARIABLES.items():
                expression = expression.replace(variable, value)
            found.append((f"dashboard {stem}", expression))
    rules = yaml.safe_load(generated_files()[RULES_PATH])
    for group in rules["groups"]:
        for rule in group["rules"]:
            found.append((rule.get("record") or rule["alert"], rule["expr"]))
    return found


def test_every_expression_parses_and_returns_data(prometheus: str, engines: list[Engine]) -> None:
    completed = asyncio.run(drive_load(engines, LOAD_S))
    assert completed > 0, "the load produced no completed request"
    pending = all_expressions()
    failures: list[str] = []
    deadline = time.monotonic() + SETTLE_S
    while pending:
        failures, still = [], []
        for origin, expression in pending:
            status, num_series = query(prometheus, expression)
            if status != "ok" or num_series == 0:
                failures.append(f"{origin}: {status}, {num_series} series: {expression[:160]}")
                still.append((origin, expression))
        pending = still
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert failures == [], "\n".join(failures)
