"""One reconcile of one LLMService: plan in the core, then execute with the kube adapter.

    plan (SKU, fit, batching, manifests)                      [core, may refuse]
    for each manifest: compare with the live object (read unless the trigger carries it);
                       apply only if the core sees a difference
    desired status from the live Deployment, and from its pods  [core: status, pod_health]
    while its rollout is unsettled

With GPU pools (spec.accelerator.pools, or a status that still has them) the service's
Deployments and pods are listed once first: the pools' split reads them (core.pool_plan), a
Deployment no longer rendered is deleted, and the status sums the pools'. Routing objects a
spec no longer asks for are deleted the same way (only for a service that had routed).
    write status only if it differs; the Events of the change [core: events]

Runs in a worker thread (kopf's executor or the resync loop); one lock per service keeps two
triggers for the same object from interleaving. Writes happen only when something differs, so
an idle resync costs reads and nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tokenpilot.adapters.clock import SYSTEM_CLOCK, Clock
from tokenpilot.adapters.kube import KubeClient, KubeError, NotFound
from tokenpilot.adapters.kube import apply as kube_apply
from tokenpilot.adapters.kube.events import post_event
from tokenpilot.adapters.kube.nodes import list_nodes
from tokenpilot.adapters.kube.pods import engine_pods
from tokenpilot.adapters.kube.resources import DEPLOYMENTS, LLMSERVICES, RESOURCES
from tokenpilot.adapters.kube.status import RECONCILER, apply_status
from tokenpilot.adapters.kube.watch import WatchCache
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMService, PoolStatus
from tokenpilot.core.conditions import ROUTED
from tokenpilot.core.errors import Infeasible, TokenPilotError
from tokenpilot.core.events import pool_events, reconcile_events
from tokenpilot.core.pod_health import PodFailure, pod_failures
from tokenpilot.core.pool_plan import observe_pools
from tokenpilot.core.render import SERVICE_LABEL, selector_string
from tokenpilot.core.render_drift import difference
from tokenpilot.core.render_plan import Plan, plan
from tokenpilot.core.retune import Tuning
from tokenpilot.core.routing import (
    HTTP_ROUTE_API_VERSION,
    HTTP_ROUTE_KIND,
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_KIND,
    routed,
)
from tokenpilot.core.sku import NodeFacts
from tokenpilot.core.status import DeploymentFacts, desired_status, owned_status

log = logging.getLogger("tokenpilot.reconcile")
ROUTING_RESOURCES = {
    INFERENCE_POOL_KIND: RESOURCES[(INFERENCE_POOL_API_VERSION, INFERENCE_POOL_KIND)],
    HTTP_ROUTE_KIND: RESOURCES[(HTTP_ROUTE_API_VERSION, HTTP_ROUTE_KIND)],
}
ROUTING_KINDS = frozenset(ROUTING_RESOURCES)


def unserved_routing(manifest: Mapping[str, Any]) -> str:
    """The refusal when the API server does not serve a routing object's kind."""
    kind, version = manifest["kind"], manifest["apiVersion"]
    crd = (
        "the Gateway API Inference Extension's InferencePool CRD"
        if kind == INFERENCE_POOL_KIND
        else "the Gateway API's HTTPRoute CRD (standard channel)"
    )
    return (
        f"spec.routing.inferencePool needs {kind} ({version}), which this cluster does not "
        f"serve: install {crd}, or remove spec.routing.inferencePool"
        + (".httpRoute" if kind == HTTP_ROUTE_KIND else "")
    )


@dataclass
class Runtime:
    """What every reconcile needs, built once at operator start."""

    client: KubeClient
    by_name: Callable[[str], GPUProfile]
    by_product: Callable[[str], GPUProfile]
    service_monitor_served: bool
    namespaces: Sequence[str] = ()
    resync_interval_s: float = 60.0
    nodes: Sequence[NodeFacts] = ()
    clock: Clock = SYSTEM_CLOCK
    # Every LLMService of the namespaces, kept by a watch (handlers/operator.py starts it);
    # read by the autoscaler's rounds and the calibration loop instead of a listing each.
    services: WatchCache | None = None
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)

    def lock(self, namespace: str, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((namespace, name), threading.Lock())


@dataclass(frozen=True)
class Outcome:
    """What one reconcile did: objects written, whether status was written, and the problem
    that stops the spec from running, if any."""

    applied: tuple[str, ...]
    status_written: bool
    problem: str | None


@dataclass(frozen=True)
class PoolsSeen:
    """A service with GPU pools (or one that had them) as one listing shows it: its
    Deployments and its engine pods."""

    deployments: tuple[dict[str, Any], ...]
    pods: tuple[dict[str, Any], ...]

    def by_name(self, name: str) -> dict[str, Any] | None:
        return next((d for d in self.deployments if d["metadata"]["name"] == name), None)


def _pools_seen(rt: Runtime, body: Mapping[str, Any]) -> PoolsSeen | None:
    """The listing, for a service whose spec or status has pools, or which is disaggregated
    (a single-SKU service costs no listing)."""
    spec, status = body.get("spec") or {}, body.get("status") or {}
    pooled = (spec.get("accelerator") or {}).get("pools") or spec.get("disaggregation")
    if not pooled and not status.get("pools"):
        return None
    meta = body["metadata"]
    namespace, uid = str(meta["namespace"]), meta.get("uid")
    selector = f"{SERVICE_LABEL}={meta['name']}"
    listed = rt.client.request(
        "GET", DEPLOYMENTS.path(namespace), query={"labelSelector": selector}
    )
    owned = tuple(
        d
        for d in listed.get("items", [])
        if any(o.get("uid") == uid for o in d["metadata"].get("ownerReferences") or [])
    )
    return PoolsSeen(owned, tuple(engine_pods(rt.client, namespace, selector)))


def _plan(rt: Runtime, service: LLMService, seen: PoolsSeen | None) -> Plan:
    now = rt.clock.now_rfc3339()
    live = None if seen is None else observe_pools(seen.deployments, seen.pods, now)
    return plan(
        service,
        nodes=rt.nodes,
        by_name=rt.by_name,
        by_product=rt.by_product,
        service_monitor_served=rt.service_monitor_served,
        now=now,
        pools_live=live,
    )


# What each trigger already knows, so a reconcile reads only what it must:
#   create      nothing exists yet: apply every object without reading it first (apply is
#               idempotent, so a create replayed after a restart is harmless)
#   deployment, pod
#               the Deployment or one of its pods changed: the Deployment is read again under
#               the lock (an event can arrive after a resync already saw a newer state, and
#               deciding from the event's copy took the status back in time, then forward
#               again: two writes for nothing); the Service and PDB wait for the resync
#   update, resume, resync
#               read each object and apply only what differs
READ_NOTHING = frozenset({"create"})
FOLLOW_DEPLOYMENT = frozenset({"deployment", "pod"})


def reconcile(
    rt: Runtime,
    body: Mapping[str, Any],
    trigger: str,
) -> Outcome:
    """Reconcile one service after `trigger` (see READ_NOTHING above for what each reads)."""
    meta = body.get("metadata", {})
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    with rt.lock(namespace, name):
        # Read it again under the lock, even on create (the resync loop may have listed the
        # new service first): another trigger may have just written its status, and deciding
        # from an older copy would repeat that write and its events.
        fresh = rt.client.get(LLMSERVICES.path(namespace, name))
        if fresh is None or fresh["metadata"].get("deletionTimestamp"):
            return Outcome((), False, None)  # gone or going: owner references do the rest
        body = fresh
        seen = _pools_seen(rt, body)
        deployment = None
        if trigger in FOLLOW_DEPLOYMENT and seen is None:
            deployment = rt.client.get(DEPLOYMENTS.path(namespace, name))
        return _reconcile(rt, body, trigger, deployment, seen)


def _live(
    rt: Runtime,
    manifest: dict[str, Any],
    trigger: str,
    deployment: Mapping[str, Any] | None,
    seen: PoolsSeen | None,
) -> tuple[bool, dict[str, Any] | None]:
    """(whether to compare at all, the live object) for one rendered manifest."""
    if manifest["kind"] == "Deployment" and seen is not None:
        return True, seen.by_name(manifest["metadata"]["name"])
    if trigger in READ_NOTHING:
        return True, None
    if manifest["kind"] == "Deployment" and deployment is not None:
        return True, dict(deployment)
    if trigger in FOLLOW_DEPLOYMENT:
        return False, None
    return True, kube_apply.read(rt.client, manifest)


def _reconcile(
    rt: Runtime,
    body: Mapping[str, Any],
    trigger: str,
    deployment: Mapping[str, Any] | None,
    seen: PoolsSeen | None = None,
) -> Outcome:
    try:
        service = LLMService.model_validate(dict(body))
    except ValidationError as exc:
        # The API server's schema should have caught this; report it rather than crash.
        meta = body.get("metadata", {})
        log.error("%s/%s does not parse: %s", meta.get("namespace"), meta.get("name"), exc)
        return Outcome((), False, f"the spec does not parse: {exc}")

    meta = service.metadata
    applied: list[str] = []
    problem: str | None = None
    detail: str | None = None
    sku_name: str | None = None
    tuning: Tuning | None = None
    live_deployment: dict[str, Any] | None = None
    pool_deployments: dict[str, dict[str, Any]] = {}
    routing_live: dict[str, Any] | None = None
    routing_read = False
    pools: list[PoolStatus] = []
    try:
        try:
            decided = _plan(rt, service, seen)
        except Infeasible:
            if trigger == "resync":
                raise
            # The node list may be older than the node that would host it: look again once.
            rt.nodes = list_nodes(rt.client)
            decided = _plan(rt, service, seen)
    except TokenPilotError as exc:
        # InvalidSpec, UnknownGPU, Infeasible: the user must act; nothing is applied. The
        # sentence goes to the conditions, the longer reasons to the Event.
        problem, detail = str(exc), exc.detail
        live_deployment = rt.client.get(DEPLOYMENTS.path(meta.namespace, meta.name))
    else:
        sku_name, tuning = decided.facts.sku_name, decided.tuning
        for manifest in decided.manifests:
            compare, live = _live(rt, manifest, trigger, deployment, seen)
            if not compare:
                continue
            why = "created" if live is None else difference(manifest, live)
            if why is not None:
                try:
                    live = kube_apply.apply(rt.client, manifest)
                except KubeError as exc:
                    if exc.status == 404 and manifest["kind"] in ROUTING_KINDS:
                        problem = unserved_routing(manifest)
                        break
                    if exc.status not in (400, 422):
                        raise  # transient: kopf or the next resync retries
                    # Refused as rendered (a malformed quantity in the spec, say): the user
                    # must act, and the objects after this one are not applied either.
                    problem = (
                        f"the API server refused the {manifest['kind']} rendered from this "
                        f"spec: {exc.message}; correct the spec field it points to"
                    )
                    break
                applied.append(f"{manifest['kind']} {meta.name} ({why})")
            if manifest["kind"] == INFERENCE_POOL_KIND:
                routing_live, routing_read = live, True
            if manifest["kind"] == "Deployment":
                live_deployment = live
                if live is not None and decided.pools:
                    pool_deployments[manifest["metadata"]["name"]] = live
        if problem is None and seen is not None:
            rendered = {
                m["metadata"]["name"] for m in decided.manifests if m["kind"] == "Deployment"
            }
            applied += _prune(rt, seen, rendered)
        if problem is None:
            applied += _prune_routing(rt, service, trigger)
        if decided.pools:
            pools = [_with_ready(p.status, pool_deployments) for p in decided.pools]
        if problem is not None and live_deployment is None and seen is None:
            live_deployment = rt.client.get(DEPLOYMENTS.path(meta.namespace, meta.name))

    now = rt.clock.now_rfc3339()
    if pool_deployments:
        facts: DeploymentFacts | None = DeploymentFacts.combined(
            [DeploymentFacts.from_object(d) for d in pool_deployments.values()]
        )
    else:
        facts = DeploymentFacts.from_object(live_deployment) if live_deployment else None
    failures, num_pods = _pod_failures(rt, service, facts, problem, seen)
    status = desired_status(
        service,
        deployment=facts,
        sku_name=sku_name,
        tuning=tuning,
        problem=problem,
        now=now,
        pod_failures=failures,
        num_pods=num_pods,
        pools=pools,
        routed=routed(routing_live, service.spec.routing),
        routing_read=routing_read,
    )
    before = owned_status(service)
    status_written = status != before
    if status_written:
        # A key left out (tuning after an Infeasible) is removed: the apply owns all of it.
        apply_status(rt.client, meta.namespace, meta.name, status, field_manager=RECONCILER)
    retuned = None if tuning is None or problem is not None else tuning.retuned
    events = reconcile_events(trigger, applied, before, status, detail=detail, retuned=retuned)
    for event in [*events, *pool_events(before, status)]:
        post_event(
            rt.client, namespace=meta.namespace, name=meta.name, uid=meta.uid, event=event, now=now
        )
    return Outcome(tuple(applied), status_written, problem)


def _prune(rt: Runtime, seen: PoolsSeen, rendered: set[str]) -> list[str]:
    """Delete the service's Deployments no longer rendered (a pool removed from the spec, the
    single Deployment replaced by pools or back); what was deleted, in words."""
    gone = []
    for live in seen.deployments:
        name = live["metadata"]["name"]
        if name in rendered:
            continue
        with contextlib.suppress(NotFound):
            rt.client.request("DELETE", DEPLOYMENTS.path(live["metadata"]["namespace"], name))
        gone.append(f"Deployment {name} (removed: no longer in the spec)")
    return gone


def _prune_routing(rt: Runtime, service: LLMService, trigger: str) -> list[str]:
    """Delete the routing objects spec.routing no longer asks for: both once routing is off
    (a service that never routed, with no Routed condition, costs no request), the HTTPRoute
    once only it is (read where the trigger reads objects)."""
    routing = service.spec.routing.inference_pool
    was_routed = any(c.type == ROUTED for c in service.status.conditions)
    if not was_routed:
        return []
    meta = service.metadata
    kinds = [INFERENCE_POOL_KIND, HTTP_ROUTE_KIND] if routing is None else []
    if routing is not None and routing.http_route is None and trigger not in FOLLOW_DEPLOYMENT:
        kinds = [HTTP_ROUTE_KIND]
    gone = []
    for kind in kinds:
        resource = ROUTING_RESOURCES[kind]
        live = rt.client.get(resource.path(meta.namespace, meta.name))
        owners = (live or {}).get("metadata", {}).get("ownerReferences") or []
        if live is None or not any(o.get("uid") == meta.uid for o in owners):
            continue
        with contextlib.suppress(NotFound):
            rt.client.request("DELETE", resource.path(meta.namespace, meta.name))
        gone.append(f"{kind} {meta.name} (removed: no longer in spec.routing)")
    return gone


def _with_ready(status: PoolStatus, live: Mapping[str, dict[str, Any]]) -> PoolStatus:
    """A pool's status with its Deployment's Ready replicas as applied now."""
    found = live.get(status.deployment)
    ready = int(((found or {}).get("status") or {}).get("readyReplicas", 0))
    return status.model_copy(update={"ready_replicas": ready})


def _pod_failures(
    rt: Runtime,
    service: LLMService,
    facts: DeploymentFacts | None,
    problem: str | None,
    seen: PoolsSeen | None,
) -> tuple[list[PodFailure], int]:
    """The engine pods that cannot run, and how many pods there are, when it matters: a
    settled rollout (or none, or a refused spec) has nothing to name, so an idle resync
    lists no pods (a service with pools has listed them already)."""
    if facts is None or facts.settled or problem is not None:
        return [], 0
    meta = service.metadata
    pods = (
        list(seen.pods)
        if seen is not None
        else engine_pods(rt.client, meta.namespace, selector_string(service))
    )
    live = [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]
    return pod_failures(live), len(live)
