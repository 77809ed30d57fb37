"""Route an LLMService through the Gateway API Inference Extension: render and read back.

`render_routing(service, routing)` returns the objects of `spec.routing` as plain dicts for
server-side apply: nothing when it is off; else an InferencePool (`inference.networking.k8s.io/
v1`) named like the service, selecting the engine pods with the Deployment's own selector and
pointing at the user's endpoint picker, and, when asked, an HTTPRoute that attaches that pool to
the user's Gateway.

`routed(pool, routing)` reads the live InferencePool's `status.parents`, where each Gateway that
handles it reports `Accepted` and `ResolvedRefs`, and words the service's `Routed` condition:
True once some Gateway accepted the pool and resolved its references, False while none has
or when one refused it (its reason and message passed on), Unknown while the Gateways' reports
are pending or describe an older generation of the pool. Pure: dicts in, data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tokenpilot.api.llmservice import ConditionStatus, LLMService
from tokenpilot.api.routing import HttpRouteRouting, InferencePoolRouting, RoutingSpec
from tokenpilot.core.render import HTTP_PORT, _metadata, selector

INFERENCE_POOL_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_POOL_GROUP}/v1"
INFERENCE_POOL_KIND = "InferencePool"
GATEWAY_GROUP = "gateway.networking.k8s.io"
HTTP_ROUTE_API_VERSION = f"{GATEWAY_GROUP}/v1"
HTTP_ROUTE_KIND = "HTTPRoute"
GATEWAY_KIND = "Gateway"
# vLLM's OpenAI server speaks HTTP/1.1 (the other value the CRD takes, kubernetes.io/h2c, is
# for gRPC engines). It is the CRD's default too; rendering it keeps the applied object equal
# to the live one the API server defaulted.
APP_PROTOCOL = "http"

# The service's condition, and its reasons besides those a Gateway reports.
ROUTED = "Routed"
REASON_NOT_YET_ACCEPTED = "NotYetAccepted"
REASON_ACCEPTED = "Accepted"
REASON_PENDING = "Pending"
# The parent conditions of InferencePool v1.
ACCEPTED = "Accepted"
RESOLVED_REFS = "ResolvedRefs"
# A Gateway's message may run to 32 KiB; the condition is one line in `kubectl describe`.
MAX_PASSED_ON_CHARS = 200


class RoutedCondition(NamedTuple):
    """The `Routed` condition as data: status, a CamelCase reason and a sentence for a person."""

    status: ConditionStatus
    reason: str
    message: str


# --- render -----------------------------------------------------------------------------------


def render_inference_pool(service: LLMService, pool: InferencePoolRouting) -> dict[str, Any]:
    """The InferencePool of the engines: the Deployment's selector, the engines' HTTP port and
    the user's endpoint picker."""
    picker = pool.endpoint_picker
    return {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": INFERENCE_POOL_KIND,
        "metadata": _metadata(service, service.metadata.name),
        "spec": {
            # One label that every engine pod of the service carries, whatever GPU pool runs it.
            "selector": {"matchLabels": selector(service)},
            "targetPorts": [{"number": HTTP_PORT}],
            "appProtocol": APP_PROTOCOL,
            "endpointPickerRef": {
                "kind": "Service",
                "name": picker.name,
                "port": {"number": picker.port},
                "failureMode": picker.failure_mode.value,
            },
        },
    }


def render_http_route(service: LLMService, route: HttpRouteRouting) -> dict[str, Any]:
    """An HTTPRoute from the named Gateway to the service's InferencePool, for one path prefix."""
    parent: dict[str, Any] = {
        "group": GATEWAY_GROUP,
        "kind": GATEWAY_KIND,
        "name": route.gateway_name,
    }
    if route.gateway_namespace is not None:
        parent["namespace"] = route.gateway_namespace
    if route.section_name is not None:
        parent["sectionName"] = route.section_name
    return {
        "apiVersion": HTTP_ROUTE_API_VERSION,
        "kind": HTTP_ROUTE_KIND,
        "metadata": _metadata(service, service.metadata.name),
        "spec": {
            "parentRefs": [parent],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": route.path_prefix}}],
                    "backendRefs": [
                        {
                            "group": INFERENCE_POOL_GROUP,
                            "kind": INFERENCE_POOL_KIND,
                            "name": service.metadata.name,
                        }
                    ],
                }
            ],
        },
    }


def render_routing(service: LLMService, routing: RoutingSpec) -> list[dict[str, Any]]:
    """The routing objects of `service`, in apply order (the pool before the route that names
    it); none when `routing.inferencePool` is left out."""
    pool = routing.inference_pool
    if pool is None:
        return []
    manifests = [render_inference_pool(service, pool)]
    if pool.http_route is not None:
        manifests.append(render_http_route(service, pool.http_route))
    return manifests


# --- read back --------------------------------------------------------------------------------
#
# Each entry of status.parents is one Gateway's verdict on the pool. A Gateway counts as
# routing when its Accepted and ResolvedRefs are both True for the pool's current generation;
# as refusing when either is False; otherwise (absent, Unknown, or written for an older
# generation) its verdict is pending. Routed is then, in this order: True when any Gateway
# routes (the others named), False when any refuses (the first refusal's reason and message),
# Unknown when verdicts are pending, and False/NotYetAccepted when no Gateway reported at all.


class _Verdict(NamedTuple):
    gateway: str
    status: ConditionStatus
    reason: str
    message: str


def _gateway(parent: Mapping[str, Any], pool_namespace: str | None) -> str:
    """A parent as a person names it: `Gateway ns/name` (another kind is named as such)."""
    ref = parent.get("parentRef") or {}
    kind = ref.get("kind") or GATEWAY_KIND
    name = ref.get("name") or "?"
    namespace = ref.get("namespace") or pool_namespace
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _current(condition: Mapping[str, Any], generation: int | None) -> bool:
    observed = condition.get("observedGeneration")
    return generation is None or observed is None or observed >= generation


def _verdict(
    parent: Mapping[str, Any], pool_namespace: str | None, generation: int | None
) -> _Verdict:
    gateway = _gateway(parent, pool_namespace)
    conditions = {c.get("type"): c for c in parent.get("conditions") or [] if c.get("type")}
    current = {t: c for t, c in conditions.items() if _current(c, generation)}
    for type_ in (ACCEPTED, RESOLVED_REFS):
        condition = current.get(type_)
        if condition is not None and condition.get("status") == ConditionStatus.false.value:
            reason = condition.get("reason") or f"Not{type_}"
            detail = _shortened(condition.get("message") or f"{type_} is False")
            return _Verdict(gateway, ConditionStatus.false, reason, detail)
    not_true = [t for t in (ACCEPTED, RESOLVED_REFS) if current.get(t, {}).get("status") != "True"]
    if not not_true:
        return _Verdict(gateway, ConditionStatus.true, REASON_ACCEPTED, "")
    stale = [t for t in not_true if t not in current and t in conditions]
    unreported = [t for t in not_true if t not in conditions]
    details = [f"{t} is {current[t].get('status') or 'unset'}" for t in not_true if t in current]
    if stale:
        details.append(f"its {' and '.join(stale)} describe an older generation of the pool")
    if unreported:
        details.append(f"it has not reported {' and '.join(unreported)}")
    return _Verdict(gateway, ConditionStatus.unknown, REASON_PENDING, "; ".join(details))


def _shortened(text: str) -> str:
    return text if len(text) <= MAX_PASSED_ON_CHARS else text[: MAX_PASSED_ON_CHARS - 1] + "…"


def _names(verdicts: Sequence[_Verdict]) -> str:
    return ", ".join(v.gateway for v in verdicts)


def _not_yet(routing: RoutingSpec, what: str) -> RoutedCondition:
    route = routing.inference_pool.http_route if routing.inference_pool else None
    awaited = ""
    if route is not None:
        where = f"{route.gateway_namespace}/" if route.gateway_namespace else ""
        awaited = f" (the HTTPRoute names Gateway {where}{route.gateway_name})"
    return RoutedCondition(
        ConditionStatus.false,
        REASON_NOT_YET_ACCEPTED,
        f"{what}: no Gateway has accepted it yet{awaited}",
    )


def routed(pool: Mapping[str, Any] | None, routing: RoutingSpec) -> RoutedCondition | None:
    """The `Routed` condition from the live InferencePool (None: not there yet); None when
    routing is off."""
    if routing.inference_pool is None:
        return None
    if pool is None:
        return _not_yet(routing, "the InferencePool is not created yet")
    metadata = pool.get("metadata") or {}
    name = metadata.get("name") or "?"
    parents = (pool.get("status") or {}).get("parents") or []
    if not parents:
        return _not_yet(routing, f"InferencePool {name}")
    generation = metadata.get("generation")
    verdicts = [_verdict(p, metadata.get("namespace"), generation) for p in parents]
    accepting = [v for v in verdicts if v.status is ConditionStatus.true]
    refusing = [v for v in verdicts if v.status is ConditionStatus.false]
    pending = [v for v in verdicts if v.status is ConditionStatus.unknown]
    if accepting:
        message = f"InferencePool {name} is accepted by {_names(accepting)}"
        if refusing:
            message += f"; refused by {_names(refusing)}"
        return RoutedCondition(ConditionStatus.true, REASON_ACCEPTED, message)
    if refusing:
        first = refusing[0]
        return RoutedCondition(
            ConditionStatus.false,
            first.reason,
            f"{first.gateway} refused InferencePool {name}: {first.message}",
        )
    first = pending[0]
    return RoutedCondition(
        ConditionStatus.unknown,
        first.reason,
        f"{first.gateway} has not accepted InferencePool {name} yet: {first.message}",
    )
