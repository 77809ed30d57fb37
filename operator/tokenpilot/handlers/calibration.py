"""Calibration of a service's GPU in the cluster (spec.batching.calibration: Auto).

Every 2 s (the operator's own task, started with kopf and stopped with it), for each service
with calibration Auto, once the reconciler has tuned it (status.tuning names the SKU and the
budget the engine runs at):

    decide (core)          Off / measured already / no ready engine / a Job runs / start one
    start                  the Job (core renders it) against one ready engine pod
    watch                  the Job and its pod; while it runs, the grid points measured so far
                           (the pod's progress port) go into the condition; on success the
                           result (the pod's termination message) is kept as a measured profile
                           and the service is reconciled again, so the tuner re-plans on it; on
                           failure the budget stays
    status                 the Calibrating condition and status.calibration, under their own
                           field manager (no other writer touches them)
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import kopf

from tokenpilot.adapters.calibration_progress import progress_url, read_progress
from tokenpilot.adapters.kube import KubeError
from tokenpilot.adapters.kube.calibration import (
    MeasuredProfiles,
    create_job,
    job_pods,
    read_job,
    ready_engine_endpoint,
)
from tokenpilot.adapters.kube.events import post_event
from tokenpilot.adapters.kube.llmservices import list_llmservices
from tokenpilot.adapters.kube.status import CALIBRATION, apply_status
from tokenpilot.api.llmservice import (
    CalibrationMode,
    ConditionStatus,
    LLMService,
)
from tokenpilot.core import conditions as cond
from tokenpilot.core.calibration.cluster import (
    Action,
    CalibrationKey,
    JobPhase,
    JobSettings,
    JobState,
    current_request,
    decide,
    decode_result,
    job_name,
    judge_job,
    key_of,
    render_job,
)
from tokenpilot.core.errors import TokenPilotError
from tokenpilot.core.render import selector_string
from tokenpilot.core.service_event import ServiceEvent
from tokenpilot.handlers import background
from tokenpilot.handlers.reconcile import Runtime, reconcile

log = logging.getLogger("tokenpilot.calibration")

CALIBRATING = "Calibrating"
TICK_S = 2.0


@dataclass
class CalibrationRuntime:
    measured: MeasuredProfiles
    settings: JobSettings


def _condition(
    service: LLMService, status: str, reason: str, message: str, now: str
) -> dict[str, Any]:
    # The one rule for lastTransitionTime (core.conditions): it moves only when status flips.
    conditions = cond.set_condition(
        service.status.conditions,
        type_=CALIBRATING,
        status=ConditionStatus(status),
        reason=reason,
        message=message,
        observed_generation=service.metadata.generation,
        now=now,
    )
    updated = cond.find(conditions, CALIBRATING)
    assert updated is not None
    return updated.model_dump(by_alias=True, mode="json", exclude_none=True)


def _write(
    rt: Runtime,
    service: LLMService,
    *,
    status: str,
    reason: str,
    message: str,
    calibration: dict[str, Any],
) -> bool:
    """Write the calibration writer's part when it differs; whether it wrote."""
    now = rt.clock.now_rfc3339()
    before = cond.find(service.status.conditions, CALIBRATING)
    old = service.status.calibration
    old_dump = old.model_dump(by_alias=True, mode="json", exclude_none=True) if old else None
    same_condition = (
        before is not None
        and before.status == status
        and before.reason == reason
        and before.message == message
    )
    if same_condition and old_dump == {k: v for k, v in calibration.items() if v is not None}:
        return False
    meta = service.metadata
    apply_status(
        rt.client,
        meta.namespace,
        meta.name,
        {
            "conditions": [_condition(service, status, reason, message, now)],
            "calibration": {k: v for k, v in calibration.items() if v is not None},
        },
        field_manager=CALIBRATION,
    )
    return True


def _event(rt: Runtime, service: LLMService, reason: str, message: str, warning: bool) -> None:
    meta = service.metadata
    post_event(
        rt.client,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        event=ServiceEvent(reason, message, warning),
        now=rt.clock.now_rfc3339(),
    )


def calibrate_tick(rt: Runtime, cal: CalibrationRuntime, body: dict[str, Any]) -> str:
    """One look at one service; what it did, in words (for logs and tests)."""
    service = LLMService.model_validate(body)
    if service.spec.batching.calibration is CalibrationMode.Off:
        return "off"
    tuning = service.status.tuning
    if tuning is None or not tuning.feasible:
        return "not tuned yet"
    meta = service.metadata
    key = key_of(service, tuning.sku)
    request = current_request(service)
    name = job_name(meta.name, key, request)
    job = read_job(rt.client, meta.namespace, name)
    last = service.status.calibration
    phase = (
        JobPhase.none
        if job is None
        else JobPhase.judged
        if last is not None and last.job == name and last.state in ("Succeeded", "Failed")
        else JobPhase.active
    )
    endpoint = (
        ready_engine_endpoint(
            rt.client, meta.namespace, selector_string(service), tuning.max_num_batched_tokens
        )
        if phase is JobPhase.none
        else None
    )
    honoured = last.request if last is not None else None
    decision = decide(
        service,
        key,
        measured_keys=cal.measured.keys,
        job=phase,
        ready_engine=endpoint is not None,
        honoured_request=honoured,
    )
    record = {"key": key.words, "job": name, "request": request}
    if decision.action is Action.nothing:
        return decision.reason
    if decision.action is Action.wait:
        _write(
            rt, service, status="False", reason="WaitingForEngine", message=decision.reason,
            # The request is answered only once a Job starts for it.
            calibration={
                **record, "request": honoured, "state": "Waiting", "message": decision.reason
            },
        )  # fmt: skip
        return decision.reason
    if decision.action is Action.start:
        assert endpoint is not None
        manifest = render_job(
            service,
            key,
            endpoint=endpoint,
            budget_tokens=tuning.max_num_batched_tokens,
            settings=cal.settings,
        )
        create_job(rt.client, manifest)
        message = f"{decision.reason}; Job {name} against {endpoint}"
        _write(
            rt, service, status="True", reason="Running", message=message,
            calibration={**record, "state": "Running", "message": message},
        )  # fmt: skip
        _event(rt, service, "CalibrationStarted", message, warning=False)
        return message
    return _watch(rt, cal, service, key, job or {}, record)


def _progress(
    rt: Runtime,
    service: LLMService,
    key: CalibrationKey,
    pods: list[dict[str, Any]],
    record: dict[str, Any],
) -> str | None:
    """Show how far the running Job is, when its pod says; the words shown, or None."""
    url = next((u for pod in pods if (u := progress_url(pod))), None)
    progress = read_progress(url) if url else None
    if progress is None:
        return None
    message = progress.condition_message(key.words, record["job"])
    _write(
        rt, service, status="True", reason="Running", message=message,
        calibration={
            **record, "state": "Running", "message": message, "progress": progress.fraction
        },
    )  # fmt: skip
    return message


def _watch(
    rt: Runtime,
    cal: CalibrationRuntime,
    service: LLMService,
    key: CalibrationKey,
    job: dict[str, Any],
    record: dict[str, Any],
) -> str:
    meta = service.metadata
    pods = job_pods(rt.client, meta.namespace, record["job"])
    verdict = judge_job(job, pods)
    if verdict.state is JobState.running:
        return _progress(rt, service, key, pods, record) or verdict.message
    if verdict.state is JobState.failed:
        if _write(
            rt, service, status="False", reason=verdict.reason, message=verdict.message,
            calibration={**record, "state": "Failed", "message": verdict.message},
        ):  # fmt: skip
            _event(rt, service, verdict.reason, verdict.message, warning=True)
        return verdict.message
    try:
        text = decode_result(verdict.result or "")
        stored = cal.measured.store(rt.client, key, text, f"Job {meta.namespace}/{record['job']}")
    except (ValueError, TokenPilotError) as exc:
        message = f"the calibration result cannot be used: {exc}; the budget stays as it was"
        if _write(
            rt, service, status="False", reason="BadResult", message=message,
            calibration={**record, "state": "Failed", "message": message},
        ):  # fmt: skip
            _event(rt, service, "BadResult", message, warning=True)
        return message
    profile = cal.measured.get(key.sku)
    provenance = ""
    if profile is not None and profile.calibration is not None:
        c = profile.calibration
        provenance = (
            f" ({c.grid} grid, {c.engine}, model {c.model}, {c.date}, held-out error at most "
            f"{c.max_held_out_error_pct:.1f} %)"
        )
    where = f"{cal.measured.namespace}/{stored}"
    message = f"measured profile ConfigMap {where}{provenance}"
    _write(
        rt, service, status="False", reason="Measured", message=message,
        calibration={**record, "state": "Succeeded", "profile": where, "message": message},
    )  # fmt: skip
    _event(rt, service, "Calibrated", f"{key.words}: {message}", warning=False)
    # The tuner re-plans on the measured profile now, not at the next resync.
    reconcile(rt, {"metadata": {"namespace": meta.namespace, "name": meta.name}}, "update")
    return message


def _wants_calibration(body: dict[str, Any]) -> bool:
    spec = body.get("spec") or {}
    deleting = (body.get("metadata") or {}).get("deletionTimestamp")
    return (spec.get("batching") or {}).get("calibration") == "Auto" and not deleting


def _tick(rt: Runtime, cal: CalibrationRuntime, body: dict[str, Any]) -> None:
    meta = body.get("metadata") or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    try:
        outcome = calibrate_tick(rt, cal, body)
    except KubeError as exc:
        log.warning("calibration of %s: %s", where, exc)
        return
    except Exception:
        # One service's bug must not stop the calibration of every other; log it loudly.
        log.exception("calibration of %s failed", where)
        return
    log.debug("calibration of %s: %s", where, outcome)


async def run_forever(rt: Runtime, cal: CalibrationRuntime) -> None:
    """Every TICK_S, one look at each service with calibration Auto, until cancelled.

    The operator's own task (as the autoscaler is), not a kopf timer: kopf puts a finalizer on
    every object a timer matches, and a finalizer would keep such a service from being deleted
    while the operator is down. Nothing here needs one: the Job is owned by the service, so the
    garbage collector removes it and its pod with the service.
    """
    while True:
        # The operator's watch-fed cache of the LLMServices, or a listing while it is not
        # current: listing every service each tick cost a tenth of the operator at 1,000.
        cached = rt.services.snapshot() if rt.services is not None else None
        items: list[dict[str, Any]] = []
        try:
            items = (
                cached
                if cached is not None
                else await asyncio.to_thread(list_llmservices, rt.client, rt.namespaces)
            )
        except KubeError as exc:
            log.warning("calibration: cannot list LLMServices: %s", exc)
        wanted = [dict(item) for item in items if _wants_calibration(item)]
        await asyncio.gather(*(asyncio.to_thread(_tick, rt, cal, body) for body in wanted))
        await asyncio.sleep(TICK_S)


@kopf.on.startup()
async def _start_calibration(memo: Any, **_: Any) -> None:
    cal: CalibrationRuntime | None = getattr(memo, "calibration", None)
    if cal is not None:
        memo.calibration_task = asyncio.create_task(
            run_forever(memo.runtime, cal), name="calibration"
        )


@kopf.on.cleanup()
async def _stop_calibration(memo: Any, **_: Any) -> None:
    await background.stop(getattr(memo, "calibration_task", None))
