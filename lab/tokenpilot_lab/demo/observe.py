"""The demo's eyes: once a second, what the service looks like to a user and to the autoscaler.

Each sample reads the LLMService (desired replicas from spec, ready replicas, the token budget
and the autoscaler's last decision from status), lists the engine pods and hands the Ready,
non-terminating ones to the load balancer (the operator's own pod listing), and scrapes them
through the same `direct` metrics source the operator uses (queue, running, P99 ITL over a
short window).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube.pods import ready_engine_pods
from tokenpilot.adapters.metrics import DirectSource, PodEndpoint, ServiceTarget
from tokenpilot.core.autoscale.window import Ring, observe_scrapes
from tokenpilot.core.conditions import PACE_AS_PROFILED
from tokenpilot_lab.demo.settings import NAMESPACE, SERVICE
from tokenpilot_lab.demo.stack import read_service
from tokenpilot_lab.loadgen import Balancer

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
    # The decision's reason code (status.autoscaling.reasonCode; "" before the first).
    reason_code: str = ""
    # The autoscaler's PaceAsProfiled condition as "status reason" ("" before it is written).
    pace: str = ""
    # The replicas that decision asked for (status.autoscaling.desiredReplicas). The operator
    # writes spec.replicas before status, so a sample taken between the two writes pairs the
    # new spec.replicas with the previous decision; summary.steps matches them up.
    decided_replicas: int | None = None
    # The prompt tokens the engines prefilled (not found in their prefix caches) and all they
    # were sent, per second between this sample's scrape and the previous one, as counted.
    computed_prompt_tokens_per_s: float | None = None
    prompt_tokens_per_s: float | None = None


class Observer:
    def __init__(self, client: KubeClient, balancer: Balancer) -> None:
        self.client = client
        self.balancer = balancer
        self.source = DirectSource(timeout_s=2.0)
        self.rings: dict[str, Ring] = {}

    def _read(self) -> tuple[dict[str, Any], tuple[PodEndpoint, ...]]:
        service = read_service(self.client)
        selector = service.get("status", {}).get("selector")
        if not selector:
            return service, ()
        return service, ready_engine_pods(self.client, NAMESPACE, selector)

    async def sample(self, t_s: float) -> Sample | None:
        """One sample; None when the API server did not answer (the next second retries)."""
        try:
            service, pods = await asyncio.to_thread(self._read)
        except KubeError:
            return None
        bases = sorted(p.metrics_url.removesuffix("/metrics") for p in pods)
        self.balancer.set_endpoints(bases)
        spec, status = service["spec"], service.get("status", {})
        target = ServiceTarget(NAMESPACE, SERVICE, int(spec.get("replicas", 0)), len(pods), pods)
        scrapes = await self.source.read(target, time.monotonic())
        self.rings, observation = observe_scrapes(
            self.rings,
            scrapes,
            spec_replicas=target.spec_replicas,
            ready_replicas=target.ready_replicas,
            window_s=VIEW_WINDOW_S,
        )
        tuning = status.get("tuning") or {}
        decision = status.get("autoscaling") or {}
        itl = observation.itl
        load = observation.load
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
            num_endpoints=len(bases),
            reason_code=str(decision.get("reasonCode", "")),
            pace=next(
                (
                    f"{c.get('status')} {c.get('reason')}"
                    for c in status.get("conditions") or []
                    if c.get("type") == PACE_AS_PROFILED
                ),
                "",
            ),
            decided_replicas=(
                int(decision["desiredReplicas"]) if "desiredReplicas" in decision else None
            ),
            computed_prompt_tokens_per_s=(
                None if load is None else load.computed_prompt_tokens / load.interval_s
            ),
            prompt_tokens_per_s=None if load is None else load.num_prompt_tokens / load.interval_s,
        )

    async def aclose(self) -> None:
        await self.source.aclose()
