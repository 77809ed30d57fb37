"""One reconcile of one LLMService: plan in the core, then execute with the kube adapter.

    plan (SKU, fit, batching, manifests)                      [core, may refuse]
    for each manifest: compare with the live object (read unless the trigger carries it);
                       apply only if the core sees a difference
    desired status from the live Deployment, and from its pods  [core: status, pod_health]
    while its rollout is unsettled
    write status only if it differs; the Events of the change [core: events]

Runs in a worker thread (kopf's executor or the resync loop); one lock per service keeps two
triggers for the same object from interleaving. Writes happen only when something differs, so
an idle resync costs reads and nothing else.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tokenpilot.adapters.clock import SYSTEM_CLOCK, Clock
from tokenpilot.adapters.kube import KubeClient, KubeError
from tokenpilot.adapters.kube import apply as kube_apply
from tokenpilot.adapters.kube.events import post_event
from tokenpilot.adapters.kube.nodes import list_nodes
from tokenpilot.adapters.kube.pods import engine_pods
from tokenpilot.adapters.kube.resources import DEPLOYMENTS, LLMSERVICES
from tokenpilot.adapters.kube.status import RECONCILER, apply_status
from tokenpilot.adapters.kube.watch import WatchCache
from tokenpilot.api.gpu_profile import GPUProfile
from tokenpilot.api.llmservice import LLMService
from tokenpilot.core.errors import Infeasible, TokenPilotError
from tokenpilot.core.events import reconcile_events
from tokenpilot.core.pod_health import PodFailure, pod_failures
from tokenpilot.core.render import selector_string
from tokenpilot.core.render_drift import difference
from tokenpilot.core.render_plan import Plan, plan
from tokenpilot.core.retune import Tuning
from tokenpilot.core.sku import NodeFacts
from tokenpilot.core.status import DeploymentFacts, desired_status, owned_status

log = logging.getLogger("tokenpilot.reconcile")


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


def _plan(rt: Runtime, service: LLMService) -> Plan:
    return plan(
        service,
        nodes=rt.nodes,
        by_name=rt.by_name,
        by_product=rt.by_product,
        service_monitor_served=rt.service_monitor_served,
        now=rt.clock.now_rfc3339(),
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
        deployment = None
        if trigger in FOLLOW_DEPLOYMENT:
            deployment = rt.client.get(DEPLOYMENTS.path(namespace, name))
        return _reconcile(rt, body, trigger, deployment)


def _live(
    rt: Runtime, manifest: dict[str, Any], trigger: str, deployment: Mapping[str, Any] | None
) -> tuple[bool, dict[str, Any] | None]:
    """(whether to compare at all, the live object) for one rendered manifest."""
    if trigger in READ_NOTHING:
        return True, None
    if manifest["kind"] == "Deployment" and deployment is not None:
        return True, dict(deployment)
    if trigger in FOLLOW_DEPLOYMENT:
        return False, None
    return True, kube_apply.read(rt.client, manifest)


def _reconcile(
    rt: Runtime, body: Mapping[str, Any], trigger: str, deployment: Mapping[str, Any] | None
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
    try:
        try:
            decided = _plan(rt, service)
        except Infeasible:
            if trigger == "resync":
                raise
            # The node list may be older than the node that would host it: look again once.
            rt.nodes = list_nodes(rt.client)
            decided = _plan(rt, service)
    except TokenPilotError as exc:
        # InvalidSpec, UnknownGPU, Infeasible: the user must act; nothing is applied. The
        # sentence goes to the conditions, the longer reasons to the Event.
        problem, detail = str(exc), exc.detail
        live_deployment = rt.client.get(DEPLOYMENTS.path(meta.namespace, meta.name))
    else:
        sku_name, tuning = decided.facts.sku_name, decided.tuning
        for manifest in decided.manifests:
            compare, live = _live(rt, manifest, trigger, deployment)
            if not compare:
                continue
            why = "created" if live is None else difference(manifest, live)
            if why is not None:
                try:
                    live = kube_apply.apply(rt.client, manifest)
                except KubeError as exc:
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
            if manifest["kind"] == "Deployment":
                live_deployment = live
        if problem is not None and live_deployment is None:
            live_deployment = rt.client.get(DEPLOYMENTS.path(meta.namespace, meta.name))

    now = rt.clock.now_rfc3339()
    facts = DeploymentFacts.from_object(live_deployment) if live_deployment else None
    failures, num_pods = _pod_failures(rt, service, facts, problem)
    status = desired_status(
        service,
        deployment=facts,
        sku_name=sku_name,
        tuning=tuning,
        problem=problem,
        now=now,
        pod_failures=failures,
        num_pods=num_pods,
    )
    before = owned_status(service)
    status_written = status != before
    if status_written:
        # A key left out (tuning after an Infeasible) is removed: the apply owns all of it.
        apply_status(rt.client, meta.namespace, meta.name, status, field_manager=RECONCILER)
    retuned = None if tuning is None or problem is not None else tuning.retuned
    for event in reconcile_events(trigger, applied, before, status, detail=detail, retuned=retuned):
        post_event(
            rt.client, namespace=meta.namespace, name=meta.name, uid=meta.uid, event=event, now=now
        )
    return Outcome(tuple(applied), status_written, problem)


def _pod_failures(
    rt: Runtime, service: LLMService, facts: DeploymentFacts | None, problem: str | None
) -> tuple[list[PodFailure], int]:
    """The engine pods that cannot run, and how many pods there are, when it matters: a
    settled rollout (or none, or a refused spec) has nothing to name, so an idle resync
    lists no pods."""
    if facts is None or facts.settled or problem is not None:
        return [], 0
    meta = service.metadata
    pods = engine_pods(rt.client, meta.namespace, selector_string(service))
    live = [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]
    return pod_failures(live), len(live)
