"""On the real API server: a steady service is evaluated every interval, and its status is not
rewritten while nothing a reader acts on changes (a write in the steady window must be one
`reader_would_notice` calls for, such as a learned figure settling past its band on a slow
machine); a change of replicas or of a condition is in status after the first evaluation that
sees it.

One engine-simulator pod under a light, paced load (two short completions a second, too few
for the workload to be learned within the test); the autoscaler evaluates every 2 s. The
forecast's words change at every evaluation (it rests on one interval more of load each time),
which is what an apply per evaluation used to write. Evaluations are counted on the operator's own
/metrics (`tokenpilot_decisions_total`), status writes on the API server's
(`apiserver_request_total` for the llmservices status subresource).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _operator_harness import (
    create,
    get_llms,
    metrics_ports,
    operator_page,
    operator_thread,
    patch_spec,
    ready_pod_ip,
    sample,
)

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.apiserver_metrics import api_writes
from tokenpilot.adapters.kube.resources import LLMSERVICES
from tokenpilot.core.autoscale.freshness import reader_would_notice
from tokenpilot.core.conditions import RECONCILER_TYPES
from tokenpilot_lab.devcluster.pytest_plugin import eventually

pytestmark = pytest.mark.cluster
NAME = "llama-8b"
INTERVAL_S = 2.0
STEADY_EVALUATIONS = 10


MODEL = sample("llama-3.1-8b-h100.yaml", "default")["spec"]["model"]["name"]
PACE_S = 0.5


@pytest.fixture
def paced_load(client: KubeClient, namespace: str) -> Iterator[None]:
    """A short completion every PACE_S to the Ready engine pod, until the test ends."""
    stop = threading.Event()

    def worker() -> None:
        with httpx.Client(timeout=30, trust_env=False) as http:
            while not stop.wait(PACE_S):
                ip = ready_pod_ip(client, namespace)
                if ip is None:
                    continue
                # The pod may be starting or going; the next request tries again.
                with contextlib.suppress(httpx.HTTPError):
                    http.post(
                        f"http://{ip}:8000/v1/completions",
                        json={"model": MODEL, "prompt": "hi", "max_tokens": 8},
                    )

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(30)


def evaluations(port: int, namespace: str) -> float:
    """The service's evaluations so far, every outcome, from the operator's /metrics."""
    page = operator_page(port)
    if page is None:
        return 0.0
    return sum(
        s.value
        for s in page.series("tokenpilot_decisions_total", namespace=namespace, llmservice=NAME)
    )


def status_writes(client: KubeClient) -> float:
    return sum(v for (_, _, sub), v in api_writes(client, {"llmservices"}).items() if sub)


def autoscaling(client: KubeClient, namespace: str) -> dict[str, Any]:
    return dict((get_llms(client, namespace, NAME).get("status") or {}).get("autoscaling") or {})


def autoscaler_part(llms: dict[str, Any]) -> dict[str, Any]:
    """What the autoscaler writes of a status, as it applies it."""
    status = llms.get("status") or {}
    part = {k: status[k] for k in ("autoscaling", "workload", "engineCosts") if k in status}
    mine = [c for c in status.get("conditions") or () if c["type"] not in RECONCILER_TYPES]
    if mine:
        part["conditions"] = mine
    return part


def condition(client: KubeClient, namespace: str, type_: str) -> dict[str, Any]:
    conditions = (get_llms(client, namespace, NAME).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def after_next_evaluation(port: int, namespace: str) -> None:
    """Return once an evaluation has both started and ended after this call: the counter is
    bumped as one ends, so the second bump from now ends one that started after it."""
    start = evaluations(port, namespace)
    eventually(
        lambda: evaluations(port, namespace) >= start + 2,
        timeout_s=10 * INTERVAL_S,
        interval_s=0.1,
        what="an evaluation that started after the change",
    )


def test_a_steady_status_is_not_rewritten_and_a_change_is_written_at_once(
    kubeconfig: Path, client: KubeClient, namespace: str, paced_load: None
) -> None:
    body = sample("llama-3.1-8b-h100.yaml", namespace)
    body["spec"]["replicas"] = 1
    body["spec"]["autoscaling"].update(
        {"minReplicas": 1, "maxReplicas": 2, "interval": "2s", "metrics": {"type": "direct"}}
    )
    (port,) = metrics_ports(1)
    with operator_thread(kubeconfig, namespace, metrics_port=port):
        create(client, body)
        # One Ready replica, its metrics read.
        eventually(
            lambda: condition(client, namespace, "MetricsAvailable").get("status") == "True",
            timeout_s=120,
            what="metrics read from the engine",
        )

        # Settled: what the first seconds learn (the engines' cost terms turning certain, say)
        # is written as it is learned; then two evaluations in a row write nothing.
        def settled() -> bool:
            writes = status_writes(client)
            after_next_evaluation(port, namespace)
            return status_writes(client) == writes

        eventually(settled, timeout_s=120, interval_s=0.0, what="two evaluations with no write")
        shown = autoscaling(client, namespace)

        # Steady: every status the API server holds over the next evaluations, as written.
        writes_before, evaluated_before = status_writes(client), evaluations(port, namespace)
        seen = [autoscaler_part(get_llms(client, namespace, NAME))]

        def steady_for_long_enough() -> bool:
            now = autoscaler_part(get_llms(client, namespace, NAME))
            if now != seen[-1]:
                seen.append(now)
            return evaluations(port, namespace) >= evaluated_before + STEADY_EVALUATIONS

        eventually(
            steady_for_long_enough,
            timeout_s=STEADY_EVALUATIONS * INTERVAL_S * 3,
            interval_s=0.05,
            what=f"{STEADY_EVALUATIONS} evaluations",
        )
        writes = status_writes(client) - writes_before
        evaluated = evaluations(port, namespace) - evaluated_before
        outcome = ("desiredReplicas", "mode", "reasonCode")
        assert {k: autoscaling(client, namespace)[k] for k in outcome} == {
            k: shown[k] for k in outcome
        }
        # A learned figure may still settle past its band on a slow machine; such a write is
        # one a reader would notice. A write of new words alone is not.
        unnoticed = [
            (before, after)
            for before, after in itertools.pairwise(seen)
            if not reader_would_notice(before, after)
        ]
        assert not unnoticed, unnoticed
        assert writes <= len(seen) - 1 < evaluated / 2, (writes, len(seen) - 1, evaluated)
        print(
            f"{evaluated:.0f} evaluations, {writes:.0f} status writes, each a change a reader "
            f"would notice; outcome {shown['reasonCode']}"
        )

        # A change of replicas: written by the first evaluation that reads it.
        patch_spec(client, namespace, NAME, {"autoscaling": {"minReplicas": 2}})
        after_next_evaluation(port, namespace)
        assert autoscaling(client, namespace)["desiredReplicas"] == 2

        # A condition that flips: metrics from a Prometheus server nobody runs.
        patch_spec(
            client,
            namespace,
            NAME,
            {
                "autoscaling": {
                    "metrics": {"type": "prometheus", "prometheusUrl": "http://127.0.0.1:9"}
                }
            },
        )
        after_next_evaluation(port, namespace)
        metrics = condition(client, namespace, "MetricsAvailable")
        assert metrics.get("status") == "False", metrics

        client.request("DELETE", LLMSERVICES.path(namespace, NAME))
        eventually(
            lambda: client.get(LLMSERVICES.path(namespace, NAME)) is None,
            timeout_s=30,
            what="the LLMService to be deleted",
        )
