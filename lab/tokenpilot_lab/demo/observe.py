"""The demo's eyes: once a second, what the service looks like to a user and to the autoscaler.

Each sample reads the LLMService (desired replicas from spec, ready replicas, the token budget
and the autoscaler's last decision from status), lists the engine pods and hands the Ready,
non-terminating ones to the load balancer, and scrapes them through the same `direct` metrics
source the operator uses (queue, running, P99 ITL over a short window).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.resources import RESOURCES
from tokenpilot.adapters.metrics import DirectSource, PodEndpoint, ServiceTarget
from tokenpilot.core.render import HTTP_PORT
from tokenpilot_lab.demo.settings import NAMESPACE, SERVICE
from tokenpilot_lab.demo.stack import read_service
from tokenpilot_lab.loadgen import Balancer

PODS = RESOURCES[("v1", "Pod")]
# Short, so the live view reacts within seconds; the operator's own window is longer.
VIEW_WINDOW_S = 10.0


@dataclass(frozen=True)
class Sample:
    """The service at `t_s` seconds after the load started (engine latencies in engine s)."""

    t_s: float
    desired_replicas: int
    ready_replicas: int
    num_waiting: float | None
    num_running: float | None
    itl_p99_s: float | None
    token_budget: int | None
    mode: str
    reason: str
    num_endpoints: int


def _ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp") or not pod.get("status", {}).get("podIP"):
        return False
    conditions = pod["status"].get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Observer:
    def __init__(self, client: KubeClient, balancer: Balancer) -> None:
        self.client = client
        self.balancer = balancer
        self.source = DirectSource(window_s=VIEW_WINDOW_S, timeout_s=2.0)

    def _read(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        service = read_service(self.client)
        selector = service.get("status", {}).get("selector")
        if not selector:
            return service, []
        pods = self.client.request("GET", PODS.path(NAMESPACE), query={"labelSelector": selector})
        return service, [p for p in pods.get("items", []) if _ready(p)]

    async def sample(self, t_s: float) -> Sample | None:
        """One sample; None when the API server did not answer (the next second retries)."""
        try:
            service, pods = await asyncio.to_thread(self._read)
        except KubeError:
            return None
        ips = sorted(p["status"]["podIP"] for p in pods)
        self.balancer.set_endpoints(f"http://{ip}:{HTTP_PORT}" for ip in ips)
        spec, status = service["spec"], service.get("status", {})
        endpoints = tuple(
            PodEndpoint(p["metadata"]["name"], f"http://{p['status']['podIP']}:{HTTP_PORT}/metrics")
            for p in pods
        )
        target = ServiceTarget(
            NAMESPACE, SERVICE, int(spec.get("replicas", 0)), len(pods), endpoints
        )
        observation = await self.source.observe(target, time.monotonic())
        tuning = status.get("tuning") or {}
        decision = status.get("autoscaling") or {}
        itl = observation.itl
        return Sample(
            t_s=t_s,
            desired_replicas=int(spec.get("replicas", 0)),
            ready_replicas=int(status.get("readyReplicas", 0)),
            num_waiting=observation.num_requests_waiting,
            num_running=observation.num_requests_running,
            itl_p99_s=None if itl is None or itl.idle or not itl.valid else itl.p99_s,
            token_budget=tuning.get("maxNumBatchedTokens"),
            mode=str(decision.get("mode", "-")),
            reason=str(decision.get("reason", "")),
            num_endpoints=len(ips),
        )

    async def aclose(self) -> None:
        await self.source.aclose()
