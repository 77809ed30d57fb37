"""Routing through an InferencePool: off by default, the objects the upstream CRDs accept, the
engine pods selected, the Routed condition read from the Gateways' reports, and bad specs
refused by field.

The rendered objects are checked against the published CRDs' OpenAPI schemas (the InferencePool
CRD of the Gateway API Inference Extension v1.6.0 from the third-party folder, the HTTPRoute
CRD of the Gateway API from its Go module) by `_schema_errors`, which checks what a structural
schema states: types, required and unknown fields, enums, patterns, lengths, bounds and sizes.
Their CEL rules are not run here; those that apply to these objects are asserted directly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from _llms import service
from pydantic import ValidationError

from tokenpilot.api.crd import openapi_schema
from tokenpilot.api.routing import RoutingSpec
from tokenpilot.core.render import HTTP_PORT, labels, owner_reference, selector
from tokenpilot.core.routing import (
    INFERENCE_POOL_API_VERSION,
    MAX_PASSED_ON_CHARS,
    render_routing,
    routed,
)
from tokenpilot_lab.gateway_crds import gateway_api_crds, inference_pool_crd

# --- a structural-schema check ---------------------------------------------------------------

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _schema_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """What the API server's schema check would refuse in `value`; an unknown field counts
    (the server would drop it without a word, so the operator's field would do nothing)."""
    where = path or "."
    kind = schema.get("type")
    if kind is not None and not _TYPES[kind](value):
        return [f"{where}: {value!r} is not of type {kind}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1e9):
            errors.append(f"{where}: length {len(value)} is out of bounds")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if _TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: {value} > {schema['maximum']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", 1e9):
            errors.append(f"{where}: {len(value)} items is out of bounds")
        for i, item in enumerate(value):
            errors += _schema_errors(item, schema.get("items", {}), f"{path}[{i}]")
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        errors += [
            f"{where}: {key} is required" for key in schema.get("required", ()) if key not in value
        ]
        if len(value) < schema.get("minProperties", 0) or len(value) > schema.get(
            "maxProperties", 1e9
        ):
            errors.append(f"{where}: {len(value)} properties is out of bounds")
        for key, item in value.items():
            if properties is not None and key in properties:
                errors += _schema_errors(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                errors += _schema_errors(item, extra, f"{path}.{key}")
            elif properties is not None:
                errors.append(f"{where}: unknown field {key}")
    return errors


def _crd_schema(path: Path, version: str) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    served = {v["name"]: v for v in crd["spec"]["versions"]}
    schema: dict[str, Any] = served[version]["schema"]["openAPIV3Schema"]
    return schema


def _upstream_pool_schema() -> dict[str, Any]:
    try:
        return _crd_schema(inference_pool_crd(), "v1")
    except FileNotFoundError as exc:
        pytest.skip(f"no InferencePool CRD to check against: {exc}")


def _upstream_route_schema() -> dict[str, Any]:
    try:
        (path,) = gateway_api_crds(("httproutes",))
    except FileNotFoundError as exc:
        pytest.skip(f"no HTTPRoute CRD to check against: {exc}")
    return _crd_schema(path, "v1")


# --- specs -----------------------------------------------------------------------------------

PICKER = {"name": "chat-epp"}
ROUTE = {"gatewayName": "inference-gateway"}


def routing(**pool: Any) -> RoutingSpec:
    return RoutingSpec.model_validate({"inferencePool": {"endpointPicker": PICKER, **pool}})


def rendered(spec: RoutingSpec, kind: str) -> dict[str, Any]:
    (manifest,) = [m for m in render_routing(service(), spec) if m["kind"] == kind]
    return manifest


# --- render ----------------------------------------------------------------------------------


def test_routing_is_off_unless_asked_for() -> None:
    off = RoutingSpec.model_validate({})
    assert off.inference_pool is None
    assert render_routing(service(), off) == []
    assert routed(None, off) is None


def test_the_pool_selects_every_engine_pod_of_the_service_and_nothing_else() -> None:
    svc = service()
    pool = rendered(routing(), "InferencePool")
    match = pool["spec"]["selector"]["matchLabels"]
    assert match == selector(svc)
    # The engine pods carry these labels, and another service's pods do not match.
    assert match.items() <= labels(svc).items()
    assert not match.items() <= labels(service("other")).items()
    assert pool["spec"]["targetPorts"] == [{"number": HTTP_PORT}]


def test_the_pool_is_named_like_the_service_and_owned_by_it() -> None:
    svc = service()
    pool = rendered(routing(), "InferencePool")
    assert pool["apiVersion"] == INFERENCE_POOL_API_VERSION
    assert (pool["metadata"]["name"], pool["metadata"]["namespace"]) == ("chat", "ml")
    assert pool["metadata"]["ownerReferences"] == [owner_reference(svc)]


@pytest.mark.parametrize(
    ("picker", "expected"),
    [
        ({"name": "chat-epp"}, {"port": {"number": 9002}, "failureMode": "FailClose"}),
        (
            {"name": "chat-epp", "port": 9100, "failureMode": "FailOpen"},
            {"port": {"number": 9100}, "failureMode": "FailOpen"},
        ),
    ],
)
def test_the_pool_points_at_the_users_endpoint_picker(
    picker: dict[str, Any], expected: dict[str, Any]
) -> None:
    spec = RoutingSpec.model_validate({"inferencePool": {"endpointPicker": picker}})
    ref = rendered(spec, "InferencePool")["spec"]["endpointPickerRef"]
    assert ref == {"kind": "Service", "name": "chat-epp", **expected}


@pytest.mark.parametrize(
    "spec",
    [
        routing(),
        RoutingSpec.model_validate(
            {"inferencePool": {"endpointPicker": {**PICKER, "port": 1, "failureMode": "FailOpen"}}}
        ),
    ],
)
def test_the_rendered_pool_is_one_the_upstream_crd_accepts(spec: RoutingSpec) -> None:
    schema = _upstream_pool_schema()
    pool = rendered(spec, "InferencePool")
    assert _schema_errors(pool, schema) == []
    # The CRD's CEL rules: target port numbers are unique, and a Service picker has a port.
    numbers = [p["number"] for p in pool["spec"]["targetPorts"]]
    assert len(numbers) == len(set(numbers))
    assert "port" in pool["spec"]["endpointPickerRef"]


@pytest.mark.parametrize(
    ("break_it", "complaint"),
    [
        (lambda spec: spec["targetPorts"].clear(), "items is out of bounds"),
        (lambda spec: spec["endpointPickerRef"]["port"].update(number=0), "0 < 1"),
        (lambda spec: spec.update(appProtocol="grpc"), "is not one of"),
        (lambda spec: spec["selector"].update(matchLabels={}), "properties is out of bounds"),
        (lambda spec: spec.update(targetPort=8000), "unknown field targetPort"),
        (lambda spec: spec.pop("selector"), "selector is required"),
    ],
)
def test_the_schema_check_refuses_what_the_crd_refuses(break_it: Any, complaint: str) -> None:
    # A check that passes everything would pass the rendered pool too.
    schema = _upstream_pool_schema()
    pool = rendered(routing(), "InferencePool")
    break_it(pool["spec"])
    assert any(complaint in error for error in _schema_errors(pool, schema))


def test_the_api_takes_what_the_upstream_endpoint_picker_ref_takes() -> None:
    upstream = _upstream_pool_schema()["properties"]["spec"]["properties"]["endpointPickerRef"]
    ours = openapi_schema(RoutingSpec)["properties"]["inferencePool"]["properties"]
    picker = ours["endpointPicker"]["properties"]
    number = upstream["properties"]["port"]["properties"]["number"]
    assert (picker["port"]["minimum"], picker["port"]["maximum"]) == (
        number["minimum"],
        number["maximum"],
    )
    failure_mode = upstream["properties"]["failureMode"]
    assert picker["failureMode"]["enum"] == failure_mode["enum"]
    assert picker["failureMode"]["default"] == failure_mode["default"]
    assert picker["name"]["maxLength"] <= upstream["properties"]["name"]["maxLength"]


def test_the_generated_schema_is_structural_and_documented() -> None:
    def walk(node: dict[str, Any], path: str) -> list[str]:
        problems = [f"{path}: {key}" for key in ("$ref", "anyOf", "title") if key in node] + (
            [] if "description" in node or path == "" else [f"{path}: no description"]
        )
        for name, prop in node.get("properties", {}).items():
            problems += walk(prop, f"{path}.{name}")
        return problems

    schema = openapi_schema(RoutingSpec)
    assert walk(schema, "") == []
    path = schema["properties"]["inferencePool"]["properties"]["httpRoute"]["properties"]
    rules = [r["rule"] for r in path["pathPrefix"]["x-kubernetes-validations"]]
    assert "self.startsWith('/')" in rules
    full = {"inferencePool": {"endpointPicker": PICKER, "httpRoute": ROUTE}}
    assert _schema_errors(full, schema) == []


def test_the_route_sends_its_path_prefix_to_the_pool() -> None:
    spec = routing(httpRoute={**ROUTE, "pathPrefix": "/v1"})
    kinds = [m["kind"] for m in render_routing(service(), spec)]
    assert kinds == ["InferencePool", "HTTPRoute"]
    route = rendered(spec, "HTTPRoute")
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/v1"}}]
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "chat"}
    ]
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gateway"}
    ]


def test_the_route_names_the_gateways_namespace_and_listener_when_given() -> None:
    spec = routing(httpRoute={**ROUTE, "gatewayNamespace": "gateways", "sectionName": "https"})
    (parent,) = rendered(spec, "HTTPRoute")["spec"]["parentRefs"]
    assert (parent["namespace"], parent["sectionName"]) == ("gateways", "https")
    assert rendered(routing(httpRoute=ROUTE), "HTTPRoute")["spec"]["rules"][0]["matches"] == [
        {"path": {"type": "PathPrefix", "value": "/"}}
    ]


def test_the_rendered_route_is_one_the_gateway_api_crd_accepts() -> None:
    schema = _upstream_route_schema()
    spec = routing(
        httpRoute={
            **ROUTE,
            "gatewayNamespace": "gateways",
            "sectionName": "http",
            "pathPrefix": "/v1",
        }
    )
    assert _schema_errors(rendered(spec, "HTTPRoute"), schema) == []


# --- the Routed condition --------------------------------------------------------------------


def parent(
    name: str = "inference-gateway",
    accepted: str | None = "True",
    resolved: str | None = "True",
    *,
    reason: str = "",
    message: str = "",
    observed: int = 2,
    namespace: str | None = None,
) -> dict[str, Any]:
    conditions = []
    for type_, status in (("Accepted", accepted), ("ResolvedRefs", resolved)):
        if status is not None:
            conditions.append(
                {
                    "type": type_,
                    "status": status,
                    "reason": (reason if status == "False" else "") or type_,
                    "message": message if status == "False" else "",
                    "observedGeneration": observed,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            )
    ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": name}
    if namespace:
        ref["namespace"] = namespace
    return {"parentRef": ref, "conditions": conditions, "controllerName": "example.net/gw"}


def live_pool(*parents: dict[str, Any], status: bool = True) -> dict[str, Any]:
    pool: dict[str, Any] = {"metadata": {"name": "chat", "namespace": "ml", "generation": 2}}
    if status:
        pool["status"] = {"parents": list(parents)}
    return pool


REFUSED = "the Gateway does not support InferencePool backends"
UNRESOLVED = "Service chat-epp not found"


@pytest.mark.parametrize(
    ("pool", "status", "reason", "words"),
    [
        (None, "False", "NotYetAccepted", ["no Gateway has accepted it yet"]),
        (live_pool(status=False), "False", "NotYetAccepted", ["no Gateway has accepted it yet"]),
        (live_pool(), "False", "NotYetAccepted", ["no Gateway has accepted it yet"]),
        (live_pool(parent()), "True", "Accepted", ["ml/inference-gateway"]),
        (
            live_pool(parent("a", namespace="gateways"), parent("b", "False", reason="Nope")),
            "True",
            "Accepted",
            ["gateways/a", "refused by Gateway ml/b"],
        ),
        (
            live_pool(parent(accepted="False", reason="NotSupportedByParent", message=REFUSED)),
            "False",
            "NotSupportedByParent",
            ["ml/inference-gateway", REFUSED],
        ),
        (
            live_pool(parent(resolved="False", reason="InvalidExtensionRef", message=UNRESOLVED)),
            "False",
            "InvalidExtensionRef",
            ["ml/inference-gateway", UNRESOLVED],
        ),
        (
            live_pool(parent(resolved=None)),
            "Unknown",
            "Pending",
            ["ml/inference-gateway", "ResolvedRefs"],
        ),
        (
            live_pool(parent(observed=1)),
            "Unknown",
            "Pending",
            ["ml/inference-gateway", "older generation"],
        ),
    ],
    ids=[
        "no-pool",
        "no-status",
        "no-parents",
        "accepted",
        "one-of-two",
        "not-accepted",
        "unresolved",
        "half-reported",
        "stale",
    ],
)
def test_routed_reads_the_gateways_reports(
    pool: dict[str, Any] | None, status: str, reason: str, words: list[str]
) -> None:
    condition = routed(pool, routing())
    assert condition is not None
    assert (condition.status, condition.reason) == (status, reason)
    for word in words:
        assert word in condition.message


def test_while_no_gateway_answers_the_condition_names_the_one_awaited() -> None:
    spec = routing(httpRoute={**ROUTE, "gatewayNamespace": "gateways"})
    condition = routed(live_pool(), spec)
    assert condition is not None
    assert "gateways/inference-gateway" in condition.message


def test_a_long_refusal_is_shortened_for_the_condition() -> None:
    pool = live_pool(parent(accepted="False", reason="Refused", message="x" * 5000))
    condition = routed(pool, routing())
    assert condition is not None
    assert len(condition.message) < MAX_PASSED_ON_CHARS + 100


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "field", "fix"),
    [
        ({"endpointPicker": {"name": "epp", "port": 0}}, "port", "greater than or equal to 1"),
        ({"endpointPicker": {"name": "epp", "port": 65536}}, "port", "less than or equal to"),
        ({"endpointPicker": {"name": "9epp"}}, "endpointPicker.name", "starting with a letter"),
        ({"endpointPicker": {"name": "epp", "failureMode": "Retry"}}, "failureMode", "FailOpen"),
        ({"endpointPicker": {}}, "name", "required"),
        ({"httpRoute": {"gatewayName": "Bad_Gateway"}}, "gatewayName", "lowercase letters"),
        ({"httpRoute": {"gatewayName": "gw", "gatewayNamespace": "A"}}, "gatewayNamespace", ""),
        ({"httpRoute": {"gatewayName": "gw", "sectionName": "-x"}}, "sectionName", "listeners"),
        ({"httpRoute": {"gatewayName": "gw", "pathPrefix": "v1"}}, "pathPrefix", "start with '/'"),
        ({"httpRoute": {"gatewayName": "gw", "pathPrefix": "/a//b"}}, "pathPrefix", "'//'"),
        ({"httpRoute": {"gatewayName": "gw", "pathPrefix": "/v1/.."}}, "pathPrefix", "'..'"),
        ({"httpRoute": {"gatewayName": "gw", "pathPrefix": "/a b"}}, "pathPrefix", "characters"),
        ({"httpRoute": {}}, "gatewayName", "required"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field_and_the_fix(
    pool: dict[str, Any], field: str, fix: str
) -> None:
    body = {"endpointPicker": PICKER, **pool}
    with pytest.raises(ValidationError) as refusal:
        RoutingSpec.model_validate({"inferencePool": body})
    message = str(refusal.value)
    assert field in message and fix in message, message
