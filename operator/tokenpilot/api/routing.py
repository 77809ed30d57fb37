"""How traffic reaches an LLMService's engines besides its ClusterIP Service (`spec.routing`).

One way so far, off unless asked for: an `InferencePool` of the Gateway API Inference
Extension (`inference.networking.k8s.io/v1`), whose endpoint picker (EPP), a Service the user
runs, chooses the engine pod for each request; and, optionally, an `HTTPRoute` that attaches the
pool to a Gateway the user runs. The operator renders both objects (`tokenpilot.core.routing`);
it runs neither the picker nor the Gateway.

The limits follow what the InferencePool and HTTPRoute CRDs accept, so a spec this API takes
is one those objects take. They are pydantic Field constraints, which the CRD generator turns
into OpenAPI ones; the path prefix's rules are CEL. In Python a validator refuses a bad value
with a sentence naming the field and the fix; at the API server the CEL rule answers with the
same sentence, and an OpenAPI constraint with the field's path and the bound it broke.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import Field, JsonValue, ValidationInfo, field_validator

from tokenpilot.api.base import ApiModel

# tokenpilot.api.llmservice holds the LLMService's spec and so imports RoutingSpec; this module
# therefore imports nothing of it (not its CelRule, nor its DNS_LABEL_PATTERN) and spells its
# few rules here, in the shape the CRD generator reads.
CEL_KEY = "x-kubernetes-validations"
# Kubernetes' name rules: a namespace or a Gateway is named by a DNS-1123 label; a Service by a
# DNS-1035 label, which must not start with a digit.
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_1035_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# A Gateway listener's name, as the HTTPRoute CRD's parentRefs[].sectionName accepts it.
SECTION_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# The characters the HTTPRoute CRD allows in a PathPrefix match: RFC 3986 path characters
# and percent-escapes.
PATH_CHARS_PATTERN = r"^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|%[0-9a-fA-F]{2})+$"
MAX_LABEL_CHARS = 63
MAX_SECTION_NAME_CHARS = 253
MAX_PATH_CHARS = 1024
# The port the upstream endpoint picker serves its ext-proc gRPC on.
DEFAULT_ENDPOINT_PICKER_PORT = 9002
DEFAULT_PATH_PREFIX = "/"


class FailureMode(StrEnum):
    """What the Gateway does with a request when the endpoint picker does not answer."""

    FailOpen = "FailOpen"  # send it to an engine pod of the Gateway's own choosing
    FailClose = "FailClose"  # refuse it


DEFAULT_FAILURE_MODE = FailureMode.FailClose


def _check_name(value: object, pattern: str, max_chars: int, field: str, what: str) -> None:
    """Refuse a misspelt name with the field and the rule in words; non-strings are left to
    pydantic's type check."""
    if isinstance(value, str) and (len(value) > max_chars or not re.fullmatch(pattern, value)):
        raise ValueError(
            f"{field} must be {what} of at most {max_chars} characters "
            f"(lowercase letters, digits and '-'), got {value!r}"
        )


class EndpointPicker(ApiModel):
    """The endpoint picker the InferencePool hands each request to: a Service the user runs
    in the LLMService's namespace (its `endpointPickerRef`)."""

    name: str = Field(
        pattern=DNS_1035_LABEL_PATTERN,
        max_length=MAX_LABEL_CHARS,
        description="Name of the endpoint picker's Service, in the LLMService's namespace.",
    )
    port: int = Field(
        DEFAULT_ENDPOINT_PICKER_PORT,
        ge=1,
        le=65535,
        description="The Service port (not the target port) the picker serves its gRPC on.",
    )
    failure_mode: FailureMode = Field(
        DEFAULT_FAILURE_MODE,
        description="When the picker does not answer: FailOpen sends the request to an engine "
        "pod the Gateway picks; FailClose refuses it.",
    )

    @field_validator("name", mode="before")
    @classmethod
    def _service_name(cls, value: object) -> object:
        _check_name(
            value,
            DNS_1035_LABEL_PATTERN,
            MAX_LABEL_CHARS,
            "endpointPicker.name",
            "a Service name starting with a letter,",
        )
        return value


PATH_STARTS_WITH_SLASH = "httpRoute.pathPrefix must start with '/', e.g. / or /v1"
PATH_IS_CLEAN = (
    "httpRoute.pathPrefix must be a plain path: no '//', no '.' or '..' segment and no "
    "escaped '/' (%2F)"
)
# The path prefix's CEL rules (those the HTTPRoute CRD puts on a PathPrefix match), each
# answering with the sentence the validator below raises.
PATH_RULES: list[JsonValue] = [
    {"rule": "self.startsWith('/')", "message": PATH_STARTS_WITH_SLASH},
    {
        "rule": "!self.contains('//') && !self.contains('/./') && !self.contains('/../') && "
        "!self.endsWith('/.') && !self.endsWith('/..') && !self.contains('%2f') && "
        "!self.contains('%2F')",
        "message": PATH_IS_CLEAN,
    },
]


class HttpRouteRouting(ApiModel):
    """An HTTPRoute that attaches the InferencePool to a Gateway the user runs."""

    gateway_name: str = Field(
        pattern=DNS_LABEL_PATTERN,
        max_length=MAX_LABEL_CHARS,
        description="Name of the Gateway the route attaches to.",
    )
    gateway_namespace: str | None = Field(
        None,
        pattern=DNS_LABEL_PATTERN,
        max_length=MAX_LABEL_CHARS,
        description="The Gateway's namespace; the LLMService's when left out. A Gateway in "
        "another namespace must allow routes from this one.",
    )
    section_name: str | None = Field(
        None,
        pattern=SECTION_NAME_PATTERN,
        max_length=MAX_SECTION_NAME_CHARS,
        description="The Gateway listener to attach to; every listener that allows the route "
        "when left out.",
    )
    path_prefix: str = Field(
        DEFAULT_PATH_PREFIX,
        min_length=1,
        max_length=MAX_PATH_CHARS,
        pattern=PATH_CHARS_PATTERN,
        description="Requests whose path starts with this go to the InferencePool, e.g. / or "
        "/v1; it must start with '/'.",
        json_schema_extra={CEL_KEY: PATH_RULES},
    )

    @field_validator("gateway_name", "gateway_namespace", mode="before")
    @classmethod
    def _gateway_names(cls, value: object, info: ValidationInfo) -> object:
        namespace = info.field_name == "gateway_namespace"
        field = "httpRoute.gatewayNamespace" if namespace else "httpRoute.gatewayName"
        what = "a namespace" if namespace else "a Gateway name"
        _check_name(value, DNS_LABEL_PATTERN, MAX_LABEL_CHARS, field, what)
        return value

    @field_validator("section_name", mode="before")
    @classmethod
    def _section_name(cls, value: object) -> object:
        if isinstance(value, str) and (
            len(value) > MAX_SECTION_NAME_CHARS or not re.fullmatch(SECTION_NAME_PATTERN, value)
        ):
            raise ValueError(
                "httpRoute.sectionName must be the name of one of the Gateway's listeners "
                f"(lowercase letters, digits, '-' and '.'), got {value!r}"
            )
        return value

    @field_validator("path_prefix", mode="before")
    @classmethod
    def _path(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        if not value.startswith("/"):
            raise ValueError(PATH_STARTS_WITH_SLASH + f", got {value!r}")
        if (
            any(part in value for part in ("//", "/./", "/../"))
            or value.endswith(("/.", "/.."))
            or "%2f" in value.lower()
        ):
            raise ValueError(PATH_IS_CLEAN + f", got {value!r}")
        if not re.fullmatch(PATH_CHARS_PATTERN, value):
            raise ValueError(
                "httpRoute.pathPrefix may hold only URL path characters (letters, digits, "
                f"-._~!$&'()*+,;=:@/ and %-escapes), got {value!r}"
            )
        return value


class InferencePoolRouting(ApiModel):
    """Route through an InferencePool named like the LLMService, holding its engine pods."""

    endpoint_picker: EndpointPicker = Field(
        description="The endpoint picker (EPP) Service that picks an engine pod per request."
    )
    http_route: HttpRouteRouting | None = Field(
        None,
        description="Attach the pool to a Gateway with an HTTPRoute; left out, the user routes "
        "to the pool themselves.",
    )


class RoutingSpec(ApiModel):
    """Ways to route to the engines besides the LLMService's ClusterIP Service."""

    inference_pool: InferencePoolRouting | None = Field(
        None,
        description="Render an InferencePool (inference.networking.k8s.io/v1) for the engines; "
        "off when left out. Needs the InferencePool CRD installed.",
    )
