"""The autoscaler end to end on the dev cluster: the operator (in this process) scales an
LLMService whose pods are engine simulators, under a real burst from the load generator.

Acceptance (issue 6): a burst makes the operator scale up within two evaluation intervals of a
signal crossing its threshold, the new pods become Ready, and after the load ends the service
returns to minReplicas, only after the scale-down window.

The signals are watched from the test through the same `direct` metrics source the operator
uses, scraping the same pods every half second, so "crossing its threshold" is measured
independently of the operator's own evaluation times.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from _operator_harness import client_for, create, get_llms, operator_thread

from tokenpilot.adapters.kube import KubeClient
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.adapters.metrics import DirectSource, PodEndpoint, ServiceTarget
from tokenpilot.core.render import HTTP_PORT
from tokenpilot.tooling.demo.settings import DemoSettings, service_manifest
from tokenpilot.tooling.demo.stack import apply_crd
from tokenpilot.tooling.devcluster.pytest_plugin import eventually
from tokenpilot.tooling.loadgen import Balancer, LoadGenerator, LoadPlan, Phase

PODS = RESOURCES[("v1", "Pod")]
INTERVAL_S = 5.0
WINDOW_S = 15.0
TARGET_QUEUE = 4.0
ITL_SLO_S = 0.05
TTFT_SLO_S = 2.0
MAX_REPLICAS = 4
# Far more than four replicas of eight sequences serve, so the queue stays above its target
# for the whole burst: calm can only begin once the load has ended and the queue drained.
BURST = Phase("burst", 20.0, 16.0, 512, 32)
# First a light load for a little over two intervals, so the operator has a window of samples
# of the Ready pod (a P99 needs two scrapes) before the burst, as it would in production.
QUIET = Phase("quiet", 2 * INTERVAL_S + 2, 1.0, 512, 32)
SAMPLE_S = 0.5


def service(namespace: str) -> dict[str, Any]:
    body = service_manifest(DemoSettings())
    body["metadata"] = {"name": "burst", "namespace": namespace}
    spec = body["spec"]
    spec["batching"]["maxNumSeqs"] = 8
    spec["slo"] = {"itlP99": f"{ITL_SLO_S * 1000:g}ms", "ttftP99": f"{TTFT_SLO_S:g}s"}
    spec["autoscaling"].update(
        minReplicas=1,
        maxReplicas=MAX_REPLICAS,
        targetQueueDepthPerReplica=TARGET_QUEUE,
        interval=f"{INTERVAL_S:g}s",
        scaleDownStabilization=f"{WINDOW_S:g}s",
    )
    spec["replicas"] = 1
    return body


@dataclass
class Timeline:
    """Monotonic times of what the test saw."""

    crossed_s: float | None = None
    scaled_up_s: float | None = None
    peak_replicas: int = 1
    peak_ready_s: float | None = None
    load_ended_s: float | None = None
    first_down_s: float | None = None
    at_min_s: float | None = None
    replicas: list[tuple[float, int, int]] = field(default_factory=list)


def ready_pods(client: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    listed = client.request("GET", PODS.path(namespace), query={"labelSelector": selector})
    out = []
    for pod in listed.get("items", []):
        status = pod.get("status", {})
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if ready and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            out.append(pod)
    return out


def over_threshold(observation: Any) -> bool:
    ready = max(1, observation.ready_replicas)
    queue = observation.num_requests_waiting
    if queue is not None and queue / ready > TARGET_QUEUE:
        return True
    itl, ttft = observation.itl, observation.ttft
    return bool(
        (itl is not None and not itl.idle and itl.p99_s > ITL_SLO_S)
        or (ttft is not None and not ttft.idle and ttft.p99_s > TTFT_SLO_S)
    )


async def watch_burst(client: KubeClient, namespace: str, name: str) -> Timeline:
    seen = Timeline()
    balancer = Balancer()
    source = DirectSource(timeout_s=2.0)
    plan = LoadPlan(
        phases=(QUIET, BURST), max_in_flight=400, request_timeout_s=120, drain_timeout_s=60
    )
    generator: LoadGenerator | None = None
    load: asyncio.Task[Any] | None = None
    deadline = (
        time.monotonic() + QUIET.duration_s + BURST.duration_s + 60 + WINDOW_S * (MAX_REPLICAS + 2)
    )
    try:
        while time.monotonic() < deadline:
            now = time.monotonic()
            body, pods = await asyncio.to_thread(_read, client, namespace, name)
            desired = int(body["spec"]["replicas"])
            ready = len(pods)
            seen.replicas.append((now, desired, ready))
            balancer.set_endpoints(f"http://{p['status']['podIP']}:{HTTP_PORT}" for p in pods)
            endpoints = tuple(
                PodEndpoint(
                    p["metadata"]["name"], f"http://{p['status']['podIP']}:{HTTP_PORT}/metrics"
                )
                for p in pods
            )
            observation = await source.observe(
                ServiceTarget(namespace, name, desired, ready, endpoints), now
            )
            if load is None and ready >= 1:
                generator = LoadGenerator(plan, balancer)
                load = asyncio.create_task(generator.run())
            if seen.crossed_s is None and over_threshold(observation):
                seen.crossed_s = now
            if seen.scaled_up_s is None and desired > 1:
                seen.scaled_up_s = now
            if desired > seen.peak_replicas:
                seen.peak_replicas, seen.peak_ready_s = desired, None
            if seen.peak_ready_s is None and seen.scaled_up_s and ready >= seen.peak_replicas:
                seen.peak_ready_s = now
            if load is not None and load.done() and seen.load_ended_s is None:
                seen.load_ended_s = now
            # Any step down, during the load or after it, counts.
            if seen.first_down_s is None and desired < seen.peak_replicas:
                seen.first_down_s = now
            if seen.load_ended_s is not None and desired == 1 and ready == 1:
                seen.at_min_s = now
                break
            await asyncio.sleep(max(0.0, SAMPLE_S - (time.monotonic() - now)))
    finally:
        if load is not None and not load.done():
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
        await source.aclose()
    return seen


def _read(client: KubeClient, namespace: str, name: str) -> tuple[dict[str, Any], list[Any]]:
    body = get_llms(client, namespace, name)
    selector = body.get("status", {}).get("selector")
    return body, ready_pods(client, namespace, selector) if selector else []


def test_a_burst_scales_up_fast_and_the_service_returns_to_min_only_after_the_window(
    kubeconfig: Any, namespace: str
) -> None:
    client = client_for(kubeconfig)
    apply_crd(client)
    with operator_thread(kubeconfig, namespace):
        create(client, service(namespace))
        eventually(
            lambda: get_llms(client, namespace, "burst").get("status", {}).get("readyReplicas"),
            timeout_s=90,
            what="the first engine pod to be Ready",
        )
        seen = asyncio.run(watch_burst(client, namespace, "burst"))
    history = ", ".join(f"{t - seen.replicas[0][0]:.1f}s {d}/{r}" for t, d, r in seen.replicas[::4])
    t0 = seen.replicas[0][0]
    print(  # the figures, for -s runs and failure reports
        {k: None if v is None else round(v - t0, 1) for k, v in (
            ("crossed", seen.crossed_s), ("scaled_up", seen.scaled_up_s),
            ("peak_ready", seen.peak_ready_s), ("load_ended", seen.load_ended_s),
            ("first_down", seen.first_down_s), ("at_min", seen.at_min_s))},
        "peak", seen.peak_replicas,
    )  # fmt: skip
    assert seen.crossed_s is not None, f"no signal crossed its threshold: {history}"
    assert seen.scaled_up_s is not None, f"the operator never scaled up: {history}"
    # Within two evaluation intervals of the crossing (plus the half-second sampling here).
    assert seen.scaled_up_s - seen.crossed_s <= 2 * INTERVAL_S + SAMPLE_S, history
    assert seen.peak_replicas > 1
    assert seen.peak_ready_s is not None, f"the new pods never became Ready: {history}"
    assert seen.load_ended_s is not None and seen.at_min_s is not None, (
        f"the service did not return to minReplicas: {history}"
    )
    assert seen.first_down_s is not None
    # Calm can start no earlier than the end of the load, and must last the whole window.
    assert seen.first_down_s - seen.load_ended_s >= WINDOW_S - SAMPLE_S, history
