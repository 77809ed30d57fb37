"""A Prometheus that answers NaN, empty vectors, or series for only some of the pods. Expected:
none of it reads as zero load (the AIBrix bug: errors turned into zeros drove a scale-down) or
as pressure; the autoscaler holds the replicas and MetricsAvailable says what is missing."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from _chaos import Operator, check_invariants, converge, service, spec_of, status
from _operator_harness import create

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.resources import LLMSERVICES
from tokenpilot_lab.devcluster.pytest_plugin import eventually

HOLD_S = 10.0


class LyingPrometheus:
    """/api/v1/query answering per `mode`: nan, empty or partial (one pod's series of two)."""

    def __init__(self) -> None:
        self.mode = "empty"
        lying = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query).get("query", [""])[0]
                body = json.dumps(lying.answer(query)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, query: str) -> dict[str, Any]:
        now = time.time()
        result: list[dict[str, Any]] = []
        if self.mode == "nan":
            result = [{"metric": {}, "value": [now, "NaN"]}]
        elif self.mode == "partial":
            if query.startswith("count("):
                result = [{"metric": {}, "value": [now, "1"]}]
            elif query.startswith("sum(vllm:num_requests_waiting"):
                result = [{"metric": {}, "value": [now, "40"]}]  # one pod's queue only
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus() -> Iterator[LyingPrometheus]:
    lying = LyingPrometheus()
    yield lying
    lying.close()


def _scale(client: KubeClient, namespace: str) -> int:
    scale = client.request("GET", LLMSERVICES.path(namespace, "lied") + "/scale")
    return int(scale["spec"]["replicas"])


def test_prometheus_answering_nan_empty_and_partial(
    client: KubeClient, namespace: str, operator: Operator, prometheus: LyingPrometheus
) -> None:
    body = service(
        namespace,
        "lied",
        replicas=2,
        autoscaling={"metrics": {"type": "prometheus", "prometheusUrl": prometheus.url}},
    )
    create(client, body)
    eventually(
        lambda: status(client, namespace, "lied").get("readyReplicas") == 2,
        timeout_s=90,
        what="two engines ready",
    )
    for mode, words in (
        ("empty", "0 of 2 ready pods"),
        ("nan", "NaN"),
        ("partial", "1 of 2 ready pods"),
    ):
        prometheus.mode = mode
        started = time.monotonic()

        def says(words: str = words) -> dict[str, Any] | None:
            conditions = status(client, namespace, "lied").get("conditions", [])
            found = [c for c in conditions if c["type"] == "MetricsAvailable"]
            ok = found and found[0]["status"] == "False" and words in found[0]["message"]
            return found[0] if ok else None

        condition = converge(
            says,
            f"Prometheus answering {mode} -> replicas held, MetricsAvailable False",
            since=started,
            timeout_s=30,
        )
        print(f"{mode}: {condition['reason']}: {condition['message']}")
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            assert _scale(client, namespace) == 2, f"{mode} moved the replicas"
            time.sleep(1.0)
    check_invariants(client, namespace, {"lied": spec_of(body)})
