"""kopf entry points for LLMService: a few lines each, all ending in `reconcile`.

    create / update / resume   the spec changed or the operator started
    owned Deployment events    status follows the Deployment; hand edits are undone
    pools loop                 a service with GPU pools, every few seconds while a pool waits
                               on the clock (spill-over; core.pools), from the watch cache
    engine pod events          status names why a pod cannot run (a crash loop, a missing
                               Secret) when it happens, not at the next resync
    resync loop                every `resync_interval_s`: nodes and optional APIs re-read,
                               every service reconciled (an idle pass writes nothing)

kopf's own bookkeeping lives in annotations, not in .status, so the status schema stays ours.
No finalizers: deletion is the garbage collector's job through owner references.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from tokenpilot.adapters.kube import KubeError, NotFound
from tokenpilot.adapters.kube.discovery import service_monitor_served
from tokenpilot.adapters.kube.llmservices import list_llmservices
from tokenpilot.adapters.kube.nodes import list_nodes
from tokenpilot.api.llmservice import GROUP, KIND, PLURAL, VERSION
from tokenpilot.core.render import MANAGED_BY, SERVICE_LABEL
from tokenpilot.handlers import background
from tokenpilot.handlers.reconcile import Runtime, reconcile

log = logging.getLogger("tokenpilot.handlers")
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"


def _runtime(memo: Any) -> Runtime:
    runtime: Runtime = memo.runtime
    return runtime


@kopf.on.startup()
async def _configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    # Events are posted by the reconciler on real changes; kopf's per-handler chatter is not.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 16
    # Only the engine pods are watched, selected by the API server: the cluster's other pods
    # never reach the operator.
    settings.watching.label_selectors["v1", "pods"] = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    memo.resync_task = asyncio.create_task(_resync_forever(_runtime(memo)), name="resync")
    memo.pools_task = asyncio.create_task(_recheck_pools_forever(_runtime(memo)), name="pools")


@kopf.on.cleanup()
async def _stop(memo: Any, **_: Any) -> None:
    await background.stop(getattr(memo, "resync_task", None))
    await background.stop(getattr(memo, "pools_task", None))


# A reconcile the API server could not answer (restarting, overloaded, etcd away) is retried
# soon, and logged as one line: it is weather, not a bug, and a traceback would say otherwise.
RETRY_UNREACHABLE_S = 5.0


def _reconcile(memo: Any, body: Any, trigger: str) -> Any:
    try:
        return reconcile(_runtime(memo), body, trigger)
    except NotFound as error:
        details = error.body.get("details") or {}
        if details.get("kind") == PLURAL and details.get("name") == body["metadata"]["name"]:
            # Deleted while being reconciled (its status write found it gone): nothing to do,
            # the garbage collector takes the rest (tests/chaos, a deletion mid scale-up).
            log.info("%s/%s: deleted while being reconciled", *_key(body))
            return None
        raise
    except KubeError as error:
        if error.status == 0 or error.status >= 500 or error.status == 429:
            raise kopf.TemporaryError(str(error), delay=RETRY_UNREACHABLE_S) from None
        raise


def _key(body: Any) -> tuple[str, str]:
    meta = body["metadata"]
    return meta.get("namespace") or "default", meta["name"]


def _handle(memo: Any, body: kopf.Body, trigger: str) -> None:
    outcome = _reconcile(memo, body, trigger)
    if outcome is not None and outcome.problem is not None:
        # Permanent: retrying cannot help until the spec or the cluster changes; the resync
        # loop re-plans quietly, and the status already says what to do.
        raise kopf.PermanentError(outcome.problem)


@kopf.on.create(GROUP, VERSION, PLURAL)
def created(body: kopf.Body, memo: Any, **_: Any) -> None:
    _handle(memo, body, "create")


@kopf.on.update(GROUP, VERSION, PLURAL)
def updated(body: kopf.Body, memo: Any, **_: Any) -> None:
    _handle(memo, body, "update")


@kopf.on.resume(GROUP, VERSION, PLURAL)
def resumed(body: kopf.Body, memo: Any, **_: Any) -> None:
    _handle(memo, body, "resume")


# How often a service with GPU pools is looked at while a pool waits on the clock (a pod
# Unschedulable until spillOver.after, a spill until retryAfter, replicas not yet Ready): no
# event marks those moments.
POOLS_RECHECK_S = 5.0


def _pools_waiting(body: Any) -> bool:
    if not ((body.get("spec") or {}).get("accelerator") or {}).get("pools"):
        return False
    return any(
        p.get("state") == "SpilledOver" or p.get("readyReplicas", 0) < p.get("replicas", 0)
        for p in (body.get("status") or {}).get("pools") or []
    )


async def _recheck_pools_forever(rt: Runtime) -> None:
    """Every POOLS_RECHECK_S, a reconcile of each service whose pools wait, read from the
    operator's watch-fed cache (while the cache is not current, the resync loop covers them).

    The operator's own task, not a kopf timer: kopf puts a finalizer on every object a timer
    matches, and that finalizer would keep a pooled service (and its CRD) from being deleted
    while the operator is down."""
    while True:
        await asyncio.sleep(POOLS_RECHECK_S)
        cached = rt.services.snapshot() if rt.services is not None else None
        for body in [dict(item) for item in cached or () if _pools_waiting(item)]:
            try:
                await asyncio.to_thread(reconcile, rt, body, "pools")
            except KubeError as exc:
                log.warning("pools of %s/%s: %s", *_key(body), exc)


@kopf.on.event("apps", "v1", "deployments", labels={MANAGED_BY_LABEL: MANAGED_BY})
def deployment_changed(
    type: str | None, body: kopf.Body, namespace: str | None, memo: Any, **_: Any
) -> None:
    if namespace is None:
        return
    owner = next(
        (o for o in body.metadata.get("ownerReferences", []) if o.get("kind") == KIND), None
    )
    if owner is None:
        return
    stub = {"metadata": {"namespace": namespace, "name": owner["name"]}}
    if type == "DELETED":
        # Deleted by hand (not by the garbage collector, which takes the owner first): rebuild.
        _reconcile(memo, stub, "deployment-deleted")
    else:
        _reconcile(memo, stub, "deployment")


@kopf.on.event("", "v1", "pods", labels={MANAGED_BY_LABEL: MANAGED_BY})
def engine_pod_changed(body: kopf.Body, namespace: str | None, memo: Any, **_: Any) -> None:
    service = body.metadata.get("labels", {}).get(SERVICE_LABEL)
    if namespace is None or service is None:
        return
    stub = {"metadata": {"namespace": namespace, "name": service}}
    # Through _reconcile: an API server away is one line, not a traceback (tests/chaos).
    _reconcile(memo, stub, "pod")


def resync_once(rt: Runtime) -> int:
    """Re-list nodes, re-check which optional APIs are served, and reconcile every service
    once; returns how many were reconciled."""
    rt.nodes = list_nodes(rt.client)
    rt.service_monitor_served = service_monitor_served(rt.client)
    items = list_llmservices(rt.client, rt.namespaces)
    for item in items:
        try:
            reconcile(rt, item, "resync")
        except KubeError as exc:
            # One service's hiccup must not starve the others; the next pass retries it.
            meta = item.get("metadata", {})
            log.warning("resync of %s/%s failed: %s", meta.get("namespace"), meta.get("name"), exc)
    return len(items)


async def _resync_forever(rt: Runtime) -> None:
    while True:
        await asyncio.sleep(rt.resync_interval_s)
        try:
            await asyncio.to_thread(resync_once, rt)
        except KubeError as exc:
            # The API server hiccupped; the next pass tries again.
            log.warning("resync failed: %s", exc)
