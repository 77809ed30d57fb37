"""The LLMService resource (`serving.tokenpilot.dev/v1alpha1`): spec and status.

These pydantic types are the single source of truth: the CRD's OpenAPI schema, its defaults, its
enums and its CEL rules are generated from them (`tokenpilot.api.crd`), and the operator parses
every object it receives through them. Cross-field rules that the API server can check are
declared next to the type as CEL (`x-kubernetes-validations`) and mirrored by a pydantic validator
so that a spec read from a file fails the same way as one sent to the cluster.

Durations (`50ms`, `2s`, `1.5s`, `1m30s`) stay strings here; the API checks their spelling and
range with the rules of `tokenpilot.api.units` (the same rules `tokenpilot plan` and the lab
use) and `tokenpilot.core` converts them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal, NamedTuple, Self

from pydantic import (
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tokenpilot.api import units
from tokenpilot.api.base import ApiModel
from tokenpilot.api.model_shape import MODEL_PRESETS, DType, ModelShape, model_preset
from tokenpilot.api.routing import RoutingSpec
from tokenpilot.api.vllm_defaults import describe_default_max_num_seqs
from tokenpilot.api.workload import (
    DEFAULT_RETUNE,
    DEFAULT_RETUNE_COOLDOWN,
    EngineCostsStatus,
    PlannedFor,
    RetuneMode,
    RetuneRecommendation,
    TuningBasis,
    WorkloadSpec,
    WorkloadStatus,
)

GROUP = "serving.tokenpilot.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "LLMService"
PLURAL = "llmservices"
SINGULAR = "llmservice"
SHORT_NAMES = ("llms",)
CATEGORIES = ("tokenpilot",)

AUTO = "auto"
# The vLLM the operator renders for: its `vllm serve` flags are checked against this version's
# parser (tests/engine), and the closed loop's metrics flags need it.
DEFAULT_ENGINE_IMAGE = "vllm/vllm-openai:v0.32.0"
# Each default lives here once: the CRD, the operator's planning, `tokenpilot plan` and the lab's
# simulator read these names. The batching profile's default is `DEFAULT_BATCHING_PROFILE`,
# below its enum.
DEFAULT_MAX_MODEL_LEN = 8192
DEFAULT_TENSOR_PARALLEL_SIZE = 1
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
MODEL_SOURCE_PATTERN = (
    r"^(hf://[^/]+/[^/]+|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/.*)?|s3://.+|file:///.+)$"
)
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"

# The CRD generator reads these keys from a model's json_schema_extra; they are not OpenAPI.
CEL_KEY = "x-kubernetes-validations"
INT_OR_STRING_KEY = "x-kubernetes-int-or-string"


class CelRule(NamedTuple):
    """A cross-field rule: the CEL the API server runs and the message it answers with. The
    pydantic validator next to it raises the same message, so a spec read from a file fails
    the way one sent to the cluster does. `message_expression` words the refusal with the
    value in it (the message is the fallback)."""

    rule: str
    message: str
    field_path: str | None = None
    message_expression: str | None = None


def _cel(*rules: CelRule) -> dict[str, Any]:
    """CEL rules as the CRD carries them."""
    out: list[dict[str, str]] = []
    for rule in rules:
        entry = {"rule": rule.rule, "message": rule.message}
        if rule.message_expression:
            entry["messageExpression"] = rule.message_expression
        if rule.field_path:
            entry["fieldPath"] = rule.field_path
        out.append(entry)
    return {CEL_KEY: out}


def _duration(rule: units.DurationRule) -> dict[str, Any]:
    """A duration field's schema: an integer is let through the type check so that CEL, not
    "must be of type string", tells the user to add a unit."""
    check, message, expression = rule.cel()
    # A bound on the length keeps CEL's cost estimate of the regular expression in budget.
    return {
        INT_OR_STRING_KEY: True,
        "maxLength": units.MAX_DURATION_CHARS,
        **_cel(CelRule(check, message, None, expression)),
    }


def _fraction(rule: units.FractionRule) -> dict[str, Any]:
    """A fraction field's schema: the range in CEL, so a percentage gets the fraction's words
    (an OpenAPI maximum of 0.98 is reported as "less than or equal to 0")."""
    check, message, expression = rule.cel()
    return _cel(CelRule(check, message, None, expression))


def _int_or_auto_rule(minimum: int, field: str) -> CelRule:
    return CelRule(
        f"type(self) == string ? self == 'auto' : self >= {minimum}",
        f"{field} must be an integer >= {minimum} or the string 'auto'",
    )


def _int_or_auto(minimum: int, field: str) -> dict[str, Any]:
    """An integer of at least `minimum` or the string `auto`, checked by the API server."""
    return {INT_OR_STRING_KEY: True, **_cel(_int_or_auto_rule(minimum, field))}


def _check_int_or_auto(value: int | str, minimum: int, field: str) -> None:
    if (isinstance(value, str) and value != AUTO) or (isinstance(value, int) and value < minimum):
        raise ValueError(_int_or_auto_rule(minimum, field).message)


_PRESET_NAMES: list[JsonValue] = [name for name in sorted(MODEL_PRESETS)]


# --- spec.model -------------------------------------------------------------------------------


class SecretKeyRef(ApiModel):
    """A key of a Secret in the LLMService's namespace."""

    name: str = Field(pattern=DNS_LABEL_PATTERN, max_length=253, description="Secret name.")
    key: str = Field("token", min_length=1, description="Key inside the Secret.")


PRESET_OR_FIELDS = CelRule(
    "has(self.preset) ? !(has(self.numParameters) || has(self.numLayers) || "
    "has(self.numAttentionHeads) || has(self.numKvHeads) || has(self.headDim) || "
    "has(self.hiddenSize)) : (has(self.numParameters) && has(self.numLayers) && "
    "has(self.numAttentionHeads) && has(self.numKvHeads) && has(self.headDim) && "
    "has(self.hiddenSize))",
    "give either shape.preset or all of numParameters, numLayers, "
    "numAttentionHeads, numKvHeads, headDim and hiddenSize, not both",
)


class ModelShapeSpec(ApiModel):
    """The model's shape for capacity planning: a named preset, or every field given."""

    preset: str | None = Field(
        None,
        description="A known model shape; mutually exclusive with the explicit fields.",
        json_schema_extra={"enum": _PRESET_NAMES},
    )
    num_parameters: int | None = Field(None, gt=0, description="Total parameter count.")
    num_layers: int | None = Field(None, gt=0, description="Number of transformer layers.")
    num_attention_heads: int | None = Field(None, gt=0, description="Query heads per layer.")
    num_kv_heads: int | None = Field(None, gt=0, description="Key/value heads per layer.")
    head_dim: int | None = Field(None, gt=0, description="Dimension of one attention head.")
    hidden_size: int | None = Field(None, gt=0, description="Width of the residual stream.")
    dtype: DType | None = Field(None, description="Weights' storage type (default bfloat16).")
    kv_cache_dtype: DType | None = Field(None, description="KV cache storage type.")

    model_config = ConfigDict(json_schema_extra=_cel(PRESET_OR_FIELDS))

    @model_validator(mode="after")
    def _preset_or_fields(self) -> Self:
        explicit = [
            self.num_parameters,
            self.num_layers,
            self.num_attention_heads,
            self.num_kv_heads,
            self.head_dim,
            self.hidden_size,
        ]
        has_any = any(v is not None for v in explicit)
        has_all = all(v is not None for v in explicit)
        if (self.preset is not None and has_any) or (self.preset is None and not has_all):
            raise ValueError(PRESET_OR_FIELDS.message)
        if self.preset is not None:
            model_preset(self.preset)
        return self

    def resolve(self) -> ModelShape:
        """The full shape: the preset's figures or the explicit ones (dtype overrides apply)."""
        if self.preset is not None:
            base = model_preset(self.preset)
            updates: dict[str, Any] = {}
            if self.dtype is not None:
                updates["dtype"] = self.dtype
            if self.kv_cache_dtype is not None:
                updates["kv_cache_dtype"] = self.kv_cache_dtype
            return base.model_copy(update=updates) if updates else base
        return ModelShape(
            num_parameters=self.num_parameters or 0,
            num_layers=self.num_layers or 0,
            num_attention_heads=self.num_attention_heads or 0,
            num_kv_heads=self.num_kv_heads or 0,
            head_dim=self.head_dim or 0,
            hidden_size=self.hidden_size or 0,
            dtype=self.dtype or DType.bfloat16,
            kv_cache_dtype=self.kv_cache_dtype,
        )


class ModelSpec(ApiModel):
    """Which model to serve, where its weights come from, and its shape."""

    name: str = Field(
        min_length=1,
        max_length=256,
        description="The served model name clients put in the OpenAI `model` field.",
    )
    source: str = Field(
        pattern=MODEL_SOURCE_PATTERN,
        description="Where the weights are: hf://org/name, pvc://claim/path, s3://bucket/path "
        "or file:///path.",
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit).")
    hub_token_secret: SecretKeyRef | None = Field(
        None, description="Secret holding a hub token, passed to the engine as HF_TOKEN."
    )
    shape: ModelShapeSpec = Field(description="The model's shape, for capacity planning.")


# --- spec.engine ------------------------------------------------------------------------------


class EnvVar(ApiModel):
    """A plain environment variable for the engine container."""

    name: str = Field(pattern=ENV_NAME_PATTERN, description="Variable name.")
    value: str = Field("", description="Variable value.")


class ResourceList(ApiModel):
    """CPU and memory as Kubernetes quantities (GPUs come from spec.accelerator)."""

    cpu: str | None = Field(
        None, pattern=QUANTITY_PATTERN, description="CPU quantity, e.g. 4 or 500m."
    )
    memory: str | None = Field(
        None, pattern=QUANTITY_PATTERN, description="Memory quantity, e.g. 32Gi."
    )


class EngineResources(ApiModel):
    """Requests and limits of the engine container besides GPUs."""

    requests: ResourceList = Field(default_factory=ResourceList, description="Requests.")
    limits: ResourceList = Field(default_factory=ResourceList, description="Limits.")


# The tensor-parallel sizes an engine may run (engine.tensorParallelSize).
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
TP_POWER_OF_TWO = CelRule(
    "self.tensorParallelSize in [1, 2, 4, 8]",
    "tensorParallelSize must be 1, 2, 4 or 8",
    ".tensorParallelSize",
)


class EngineSpec(ApiModel):
    """The vLLM engine: image and `vllm serve` settings."""

    image: str = Field(DEFAULT_ENGINE_IMAGE, min_length=1, description="vLLM OpenAI server image.")
    max_model_len: int = Field(
        DEFAULT_MAX_MODEL_LEN,
        ge=16,
        description="Longest context (prompt + output) in tokens: the KV cache is planned for "
        "it and the engine gets it as --max-model-len.",
    )
    tensor_parallel_size: int = Field(
        DEFAULT_TENSOR_PARALLEL_SIZE,
        ge=1,
        le=8,
        description="GPUs one engine shards the model across (1, 2, 4 or 8).",
    )
    gpu_memory_utilization: float = Field(
        DEFAULT_GPU_MEMORY_UTILIZATION,
        description="Fraction of GPU memory the engine may use, above 0 and at most 0.98.",
        json_schema_extra=_fraction(units.GPU_MEMORY_UTILIZATION),
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="More `vllm serve` arguments; flags the operator sets are rejected.",
    )
    env: list[EnvVar] = Field(default_factory=list, description="Extra environment.")
    workload_metrics: bool = Field(
        True,
        description="Give the engines the histogram buckets and the FLOPs and bytes counters the "
        "operator learns the workload and the steps' costs from (--custom-histogram-buckets, "
        "--enable-mfu-metrics; vLLM 0.32 or later): false for an older engine image.",
    )
    resources: EngineResources = Field(
        default_factory=EngineResources, description="CPU and memory requests and limits."
    )

    model_config = ConfigDict(json_schema_extra=_cel(TP_POWER_OF_TWO))

    @field_validator("gpu_memory_utilization", mode="before")
    @classmethod
    def _gpu_memory_fraction(cls, value: object) -> object:
        units.GPU_MEMORY_UTILIZATION.check(value)
        return value

    @model_validator(mode="after")
    def _tp_power_of_two(self) -> Self:
        if self.tensor_parallel_size not in TENSOR_PARALLEL_SIZES:
            raise ValueError(TP_POWER_OF_TWO.message)
        return self


# --- spec.accelerator -------------------------------------------------------------------------


class TolerationOperator(StrEnum):
    Equal = "Equal"
    Exists = "Exists"


class TaintEffect(StrEnum):
    NoSchedule = "NoSchedule"
    PreferNoSchedule = "PreferNoSchedule"
    NoExecute = "NoExecute"


class Toleration(ApiModel):
    """A pod toleration, as in core/v1."""

    key: str | None = Field(None, description="Taint key; empty with Exists matches all.")
    operator: TolerationOperator = Field(TolerationOperator.Equal, description="Equal|Exists.")
    value: str | None = Field(None, description="Taint value for Equal.")
    effect: TaintEffect | None = Field(None, description="Taint effect; empty matches all.")
    toleration_seconds: int | None = Field(None, description="For NoExecute only.")


POOL_MIN_WITHIN_MAX = CelRule(
    "self.minReplicas <= self.maxReplicas",
    "a pool's minReplicas must be <= its maxReplicas",
    ".minReplicas",
)
MAX_POOLS = 8
POOL_NOT_AUTO = CelRule(
    "self.sku.lowerAscii() != 'auto'",
    "a pool names its SKU (e.g. H100-80GB); `auto` is for spec.accelerator.sku alone",
    ".sku",
)


def _named_sku() -> Any:
    """A pool's SKU field: a name the profile catalog knows, never `auto`."""
    return Field(
        min_length=1,
        max_length=40,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9._]*$",
        description="A GPU SKU name known to the profile catalog (e.g. H100-80GB, L40S); "
        "not `auto`.",
    )


class GpuPool(ApiModel):
    """One GPU type the service may run on: its own Deployment, budget and replica range."""

    sku: str = _named_sku()
    gpus_per_replica: int | None = Field(
        None, ge=1, le=8, description="GPUs per engine pod; defaults to tensorParallelSize."
    )
    min_replicas: int = Field(0, ge=0, le=1000, description="Replicas this pool always runs.")
    max_replicas: int = Field(
        8, ge=1, le=1000, description="Most replicas this pool runs (what its GPUs allow)."
    )
    price_per_gpu_hour: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="What one GPU of this pool costs an hour, in any currency the pools share; "
        "the mix buys the least cost for the capacity it needs. Unpriced pools are filled "
        "in list order.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels this pool's pods must match."
    )

    model_config = ConfigDict(json_schema_extra=_cel(POOL_MIN_WITHIN_MAX, POOL_NOT_AUTO))

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"{POOL_MIN_WITHIN_MAX.message} (pool {self.sku})")
        if self.sku.lower() == AUTO:
            raise ValueError(POOL_NOT_AUTO.message)
        return self


class SpillOverSpec(ApiModel):
    """When a pool's pods cannot be placed, its share moves to the next pool."""

    after: str = Field(
        "2m",
        description="How long a pool's pod may stay Unschedulable before its share spills "
        "over to the next pool (0s to 1h).",
        json_schema_extra=_duration(units.SPILL_OVER_AFTER),
    )
    retry_after: str = Field(
        "10m",
        description="How long a spilled pool waits before it is offered its share again "
        "(1s to 24h); the spilled-to pools keep theirs until it is Ready.",
        json_schema_extra=_duration(units.SPILL_OVER_RETRY),
    )

    @field_validator("after", "retry_after", mode="before")
    @classmethod
    def _windows(cls, value: object, info: ValidationInfo) -> object:
        rule = units.SPILL_OVER_AFTER if info.field_name == "after" else units.SPILL_OVER_RETRY
        rule.parse_s(value)
        return value


POOLS_NAME_THE_SKU = CelRule(
    "!has(self.pools) || size(self.pools) == 0 || self.sku == 'auto'",
    "with accelerator.pools, each pool names its SKU: leave accelerator.sku unset (auto)",
    ".sku",
)
POOLS_ALL_PRICED_OR_NONE = CelRule(
    "!has(self.pools) || self.pools.all(p, has(p.pricePerGpuHour)) || "
    "self.pools.all(p, !has(p.pricePerGpuHour))",
    "give every pool a pricePerGpuHour or none (the mix compares the pools' costs)",
    ".pools",
)


class AcceleratorSpec(ApiModel):
    """Which GPUs the engine runs on: one SKU (`sku`), or several pools (`pools`)."""

    sku: str = Field(
        AUTO,
        min_length=1,
        description="A GPU SKU name known to the profile catalog (e.g. H100-80GB, L40S), or "
        "`auto` to pick from the nodes' nvidia.com/gpu.product labels.",
    )
    gpus_per_replica: int | None = Field(
        None, ge=1, le=8, description="GPUs per engine pod; defaults to tensorParallelSize."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels the pods must match."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations added to the pods."
    )
    pools: list[GpuPool] = Field(
        default_factory=list,
        max_length=MAX_POOLS,
        description="Several GPU types, one Deployment each, in order of preference; the "
        "autoscaler's replicas are split across them (docs/heterogeneous.md). Empty: one "
        "pool on `sku`.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["sku"]},
    )
    spill_over: SpillOverSpec = Field(
        default_factory=SpillOverSpec,
        description="When a pool's pods cannot be placed (pools only).",
    )

    model_config = ConfigDict(json_schema_extra=_cel(POOLS_NAME_THE_SKU, POOLS_ALL_PRICED_OR_NONE))

    @model_validator(mode="after")
    def _pools(self) -> Self:
        if self.pools and self.sku != AUTO:
            raise ValueError(POOLS_NAME_THE_SKU.message)
        priced = {p.price_per_gpu_hour is not None for p in self.pools}
        if len(priced) > 1:
            raise ValueError(POOLS_ALL_PRICED_OR_NONE.message)
        skus = [p.sku for p in self.pools]
        if len(set(skus)) != len(skus):
            raise ValueError(f"accelerator.pools names a SKU twice ({skus}): one pool per SKU")
        return self


# --- spec.disaggregation ----------------------------------------------------------------------

PHASE_NOT_AUTO = CelRule(
    "self.sku.lowerAscii() != 'auto'",
    "a prefill or decode pool names its SKU (e.g. H100-80GB); `auto` is for "
    "spec.accelerator.sku alone",
    ".sku",
)
PHASE_MIN_WITHIN_MAX = CelRule(
    "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
    "a prefill or decode pool's minReplicas must be <= its maxReplicas",
    ".minReplicas",
)


class PhasePool(ApiModel):
    """The prefill or the decode pool of a disaggregated service: its own Deployment."""

    sku: str = _named_sku()
    tensor_parallel_size: int | None = Field(
        None,
        ge=1,
        le=8,
        description="GPUs per engine of this pool; defaults to engine.tensorParallelSize. "
        "The prefill pool's lever for long prompts (docs/disaggregation.md).",
    )
    replicas: int = Field(
        1,
        ge=0,
        le=1000,
        description="Engine replicas of this pool; with spec.autoscaling.enabled the autoscaler "
        "sets it (leave it out of applied manifests, as spec.replicas).",
    )
    min_replicas: int | None = Field(
        None,
        ge=0,
        le=1000,
        description="The fewest replicas the autoscaler gives this pool; defaults to "
        "autoscaling.minReplicas.",
    )
    max_replicas: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="The most replicas the autoscaler gives this pool; defaults to "
        "autoscaling.maxReplicas.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels this pool's pods must match."
    )

    model_config = ConfigDict(json_schema_extra=_cel(PHASE_NOT_AUTO, PHASE_MIN_WITHIN_MAX))

    @model_validator(mode="after")
    def _named(self) -> Self:
        if self.sku.lower() == AUTO:
            raise ValueError(PHASE_NOT_AUTO.message)
        if (
            self.min_replicas is not None
            and self.max_replicas is not None
            and self.min_replicas > self.max_replicas
        ):
            raise ValueError(PHASE_MIN_WITHIN_MAX.message)
        return self


class DisaggregationSpec(ApiModel):
    """Prefill and decode apart: a pool whose engines compute each prompt's KV and first token,
    and a pool whose engines pull that KV over NIXL and decode (docs/disaggregation.md)."""

    prefill: PhasePool = Field(description="The pool that prefills.")
    decode: PhasePool = Field(description="The pool that decodes.")
    routing_sidecar_image: str = Field(
        min_length=1,
        description="The llm-d routing sidecar's image from your llm-d install; it runs beside "
        "each decode engine and takes the prefill step the endpoint picker chose.",
    )
    kv_link_gbps: float | None = Field(
        None,
        gt=0,
        le=100000,
        description="The network between a prefill and a decode pod, Gb/s one way, that the "
        "KV transfer is priced at; defaults to 400 (one NDR InfiniBand NIC per GPU).",
    )

    @property
    def pools(self) -> tuple[PhasePool, PhasePool]:
        """The prefill pool, then the decode pool."""
        return self.prefill, self.decode


# --- spec.batching ----------------------------------------------------------------------------


class BatchingProfile(StrEnum):
    """How the tuner trades latency against throughput."""

    interactive = "interactive"
    balanced = "balanced"
    throughput = "throughput"


DEFAULT_BATCHING_PROFILE = BatchingProfile.balanced
# Checked here and nowhere else; when either is `auto`, the tuner keeps seqs within the budget.
SEQS_WITHIN_BUDGET = CelRule(
    "!(type(self.maxNumBatchedTokens) == int && type(self.maxNumSeqs) == int) || "
    "self.maxNumBatchedTokens >= self.maxNumSeqs",
    "maxNumBatchedTokens must be >= maxNumSeqs (each sequence needs a token per step)",
    ".maxNumBatchedTokens",
)


class CalibrationMode(StrEnum):
    """Whether the operator measures the GPU's step times before tuning (docs/calibration.md)."""

    Auto = "Auto"  # on a SKU with no measured profile, calibrate once, then tune on the result
    Off = "Off"  # tune on the profile there is (datasheet or measured)


class BatchingSpec(ApiModel):
    """Continuous batching: chunked prefill and the per-step token budget."""

    chunked_prefill: bool = Field(True, description="Split long prompts across steps.")
    max_num_batched_tokens: int | str = Field(
        AUTO,
        description="Per-step token budget, or `auto` to let the tuner pick it for the GPU.",
        json_schema_extra=_int_or_auto(16, "maxNumBatchedTokens"),
    )
    max_num_seqs: int | str = Field(
        AUTO,
        description="Most sequences in one step, or `auto`: vLLM's own default for the GPU "
        f"({describe_default_max_num_seqs()}) or the token budget when the spec sets a smaller "
        "one, lowered where vLLM's smallest budget (that many tokens a step) would crowd out the "
        "decodes the ITL SLO allows.",
        json_schema_extra=_int_or_auto(1, "maxNumSeqs"),
    )
    profile: BatchingProfile = Field(
        DEFAULT_BATCHING_PROFILE, description="interactive | balanced | throughput."
    )
    calibration: CalibrationMode = Field(
        CalibrationMode.Off,
        description="Auto: on a SKU without a measured profile, run `tokenpilot calibrate` "
        "against the engine once and tune on the measured profile; Off: never.",
    )
    retune: RetuneMode = Field(
        DEFAULT_RETUNE,
        description="When the workload the engines served moves the tuner's recommendation "
        "materially: Auto rolls the engines to it (at most once per retuneCooldown, never during "
        "a scale-up or an SLO breach); Advise publishes it in status.tuning.recommendation; "
        "Off keeps the budget. Only where maxNumBatchedTokens or maxNumSeqs is `auto`.",
    )
    retune_cooldown: str = Field(
        DEFAULT_RETUNE_COOLDOWN,
        description="Least time between two re-tunes (1m to 168h).",
        json_schema_extra=_duration(units.RETUNE_COOLDOWN),
    )

    model_config = ConfigDict(json_schema_extra=_cel(SEQS_WITHIN_BUDGET))

    @field_validator("retune_cooldown", mode="before")
    @classmethod
    def _cooldown(cls, value: object) -> object:
        units.RETUNE_COOLDOWN.parse_s(value)
        return value

    @model_validator(mode="after")
    def _budget_fits_seqs(self) -> Self:
        _check_int_or_auto(self.max_num_batched_tokens, 16, "maxNumBatchedTokens")
        _check_int_or_auto(self.max_num_seqs, 1, "maxNumSeqs")
        budget, seqs = self.max_num_batched_tokens, self.max_num_seqs
        if isinstance(budget, int) and isinstance(seqs, int) and budget < seqs:
            raise ValueError(SEQS_WITHIN_BUDGET.message)
        return self


# --- spec.slo ---------------------------------------------------------------------------------


class SloSpec(ApiModel):
    """Latency objectives the tuner and the autoscaler aim for."""

    ttft_p99: str | None = Field(
        None,
        description="P99 time to first token, e.g. 2s (1ms to 10m).",
        json_schema_extra=_duration(units.TTFT_P99),
    )
    itl_p99: str | None = Field(
        None,
        description="P99 inter-token latency, e.g. 50ms (1ms to 10s).",
        json_schema_extra=_duration(units.ITL_P99),
    )
    attainment: float = Field(
        0.99,
        description="Fraction of requests that must meet the objectives, above 0.5 and below 1.",
        json_schema_extra=_fraction(units.ATTAINMENT),
    )

    @field_validator("ttft_p99", "itl_p99", mode="before")
    @classmethod
    def _latency(cls, value: object, info: ValidationInfo) -> object:
        rule = units.ITL_P99 if info.field_name == "itl_p99" else units.TTFT_P99
        if value is not None:
            rule.parse_s(value)
        return value

    @field_validator("attainment", mode="before")
    @classmethod
    def _attainment_fraction(cls, value: object) -> object:
        units.ATTAINMENT.check(value)
        return value


# --- spec.autoscaling -------------------------------------------------------------------------


class MetricsSourceType(StrEnum):
    direct = "direct"
    prometheus = "prometheus"


URL_FOR_PROMETHEUS = CelRule(
    "self.type != 'prometheus' || has(self.prometheusUrl)",
    "metrics.prometheusUrl is required when metrics.type is prometheus",
    ".prometheusUrl",
)


class MetricsSpec(ApiModel):
    """Where the autoscaler reads engine metrics."""

    type: MetricsSourceType = Field(
        MetricsSourceType.direct,
        description="direct: scrape every ready engine pod; prometheus: query a server.",
    )
    prometheus_url: str | None = Field(
        None, pattern=r"^https?://.+", description="Prometheus base URL for type prometheus."
    )

    model_config = ConfigDict(json_schema_extra=_cel(URL_FOR_PROMETHEUS))

    @model_validator(mode="after")
    def _url_for_prometheus(self) -> Self:
        if self.type is MetricsSourceType.prometheus and self.prometheus_url is None:
            raise ValueError(URL_FOR_PROMETHEUS.message)
        return self


MIN_WITHIN_MAX = CelRule(
    "self.minReplicas <= self.maxReplicas", "minReplicas must be <= maxReplicas", ".minReplicas"
)


class AutoscalingSpec(ApiModel):
    """The SLO autoscaler: bounds, targets and windows."""

    enabled: bool = Field(False, description="Let the autoscaler own spec.replicas.")
    min_replicas: int = Field(1, ge=1, description="Fewest replicas.")
    max_replicas: int = Field(4, ge=1, le=1000, description="Most replicas.")
    target_queue_depth_per_replica: float = Field(
        4.0, gt=0.0, description="Waiting requests per ready replica that trigger a scale-up."
    )
    interval: str = Field(
        "5s",
        description="Evaluation interval (1s to 10m).",
        json_schema_extra=_duration(units.AUTOSCALING_INTERVAL),
    )
    scale_up_stabilization: str = Field(
        "0s",
        description="Window before a (non-panic) scale-up (0s to 1h).",
        json_schema_extra=_duration(units.STABILIZATION_WINDOW),
    )
    scale_down_stabilization: str = Field(
        "300s",
        description="Window of calm before a scale-down (0s to 1h).",
        json_schema_extra=_duration(units.STABILIZATION_WINDOW),
    )
    metrics: MetricsSpec = Field(
        default_factory=MetricsSpec, description="Where engine metrics come from."
    )

    model_config = ConfigDict(json_schema_extra=_cel(MIN_WITHIN_MAX))

    @field_validator(
        "interval", "scale_up_stabilization", "scale_down_stabilization", mode="before"
    )
    @classmethod
    def _windows(cls, value: object, info: ValidationInfo) -> object:
        interval = info.field_name == "interval"
        (units.AUTOSCALING_INTERVAL if interval else units.STABILIZATION_WINDOW).parse_s(value)
        return value

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(MIN_WITHIN_MAX.message)
        return self


# --- spec -------------------------------------------------------------------------------------


SPLIT_NEEDS_PICKER = CelRule(
    "!has(self.disaggregation) || has(self.routing.inferencePool)",
    "spec.disaggregation needs spec.routing.inferencePool: each request's prefill and decode "
    "pods are chosen by an endpoint picker (the llm-d router's); name it there",
    ".disaggregation",
)
SPLIT_NOT_POOLS = CelRule(
    "!has(self.disaggregation) || !has(self.accelerator.pools) || "
    "size(self.accelerator.pools) == 0",
    "spec.disaggregation and spec.accelerator.pools do not go together: name each phase's SKU "
    "under spec.disaggregation",
    ".disaggregation",
)
SPLIT_READS_PODS = CelRule(
    "!has(self.disaggregation) || !self.autoscaling.enabled || "
    "self.autoscaling.metrics.type == 'direct'",
    "a disaggregated service's pools are scaled on their own pods' pages: set "
    "spec.autoscaling.metrics.type to direct",
    ".autoscaling.metrics.type",
)
GPUS_COVER_TP = CelRule(
    "!has(self.accelerator.gpusPerReplica) || "
    "self.accelerator.gpusPerReplica >= self.engine.tensorParallelSize",
    "accelerator.gpusPerReplica must be >= engine.tensorParallelSize",
    ".accelerator.gpusPerReplica",
)
POOL_GPUS_COVER_TP = CelRule(
    "!has(self.accelerator.pools) || self.accelerator.pools.all(p, !has(p.gpusPerReplica) || "
    "p.gpusPerReplica >= self.engine.tensorParallelSize)",
    "each of accelerator.pools' gpusPerReplica must be >= engine.tensorParallelSize",
    ".accelerator.pools",
)
WHOLE_PROMPT_PER_STEP = CelRule(
    "self.batching.chunkedPrefill || "
    "type(self.batching.maxNumBatchedTokens) != int || "
    "self.batching.maxNumBatchedTokens >= self.engine.maxModelLen",
    "without chunked prefill, batching.maxNumBatchedTokens must be >= "
    "engine.maxModelLen (a whole prompt must fit one step)",
    ".batching.maxNumBatchedTokens",
)


class LLMServiceSpec(ApiModel):
    """What the user asks for: one model served by a tuned vLLM fleet."""

    model: ModelSpec = Field(description="The model to serve.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="The vLLM engine.")
    accelerator: AcceleratorSpec = Field(
        default_factory=AcceleratorSpec, description="GPU SKU and placement."
    )
    batching: BatchingSpec = Field(
        default_factory=BatchingSpec, description="Chunked prefill and token budget."
    )
    slo: SloSpec = Field(default_factory=SloSpec, description="Latency objectives.")
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec, description="The SLO autoscaler."
    )
    workload: WorkloadSpec = Field(
        default_factory=WorkloadSpec,
        description="What is known of the traffic before the engines serve any.",
    )
    routing: RoutingSpec = Field(
        default_factory=RoutingSpec,
        description="How requests reach the engines besides the Service (docs/heterogeneous.md).",
    )
    disaggregation: DisaggregationSpec | None = Field(
        None,
        description="Prefill and decode on separate pools, each tuned for its own SLO; off "
        "(one pool does both) when left out. Needs routing.inferencePool.",
    )
    replicas: int = Field(
        1, ge=0, le=1000, description="Engine replicas; written by the autoscaler when enabled."
    )

    model_config = ConfigDict(
        json_schema_extra=_cel(
            GPUS_COVER_TP,
            POOL_GPUS_COVER_TP,
            WHOLE_PROMPT_PER_STEP,
            SPLIT_NEEDS_PICKER,
            SPLIT_NOT_POOLS,
            SPLIT_READS_PODS,
        )
    )

    @model_validator(mode="after")
    def _cross_fields(self) -> Self:
        gpus = self.accelerator.gpus_per_replica
        if gpus is not None and gpus < self.engine.tensor_parallel_size:
            raise ValueError(GPUS_COVER_TP.message)
        for pool in self.accelerator.pools:
            if pool.gpus_per_replica is not None and (
                pool.gpus_per_replica < self.engine.tensor_parallel_size
            ):
                raise ValueError(f"{POOL_GPUS_COVER_TP.message} (pool {pool.sku})")
        budget = self.batching.max_num_batched_tokens
        if (
            not self.batching.chunked_prefill
            and isinstance(budget, int)
            and budget < self.engine.max_model_len
        ):
            raise ValueError(WHOLE_PROMPT_PER_STEP.message)
        if self.disaggregation is not None:
            if self.routing.inference_pool is None:
                raise ValueError(SPLIT_NEEDS_PICKER.message)
            if self.accelerator.pools:
                raise ValueError(SPLIT_NOT_POOLS.message)
            if (
                self.autoscaling.enabled
                and self.autoscaling.metrics.type is not MetricsSourceType.direct
            ):
                raise ValueError(SPLIT_READS_PODS.message)
        return self

    @property
    def gpus_per_replica(self) -> int:
        return self.accelerator.gpus_per_replica or self.engine.tensor_parallel_size


# --- status -----------------------------------------------------------------------------------


class Phase(StrEnum):
    """One word for people; the conditions carry the detail."""

    Pending = "Pending"
    Progressing = "Progressing"
    Ready = "Ready"
    Degraded = "Degraded"
    Infeasible = "Infeasible"


class ConditionStatus(StrEnum):
    true = "True"
    false = "False"
    unknown = "Unknown"


class Condition(ApiModel):
    """A Kubernetes condition (metav1.Condition shape)."""

    type: str = Field(
        min_length=1,
        description="Ready, Progressing, Degraded, Infeasible, MetricsAvailable or PaceAsProfiled.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(min_length=1, description="CamelCase reason.")
    message: str = Field("", description="What happened, for a person.")
    last_transition_time: str = Field(description="When status last flipped (RFC 3339).")
    observed_generation: int | None = Field(None, description="Generation this describes.")


class BatchingSource(StrEnum):
    """Where the batching figures came from."""

    spec = "Spec"  # the spec's integers
    measured_profile = "MeasuredProfile"  # the tuner, on the GPU's measured profile
    datasheet_profile = "DatasheetProfile"  # the tuner, on the GPU's datasheet figures only


class BoundKind(StrEnum):
    """What sets or limits a token budget."""

    spec = "Spec"  # the spec's integer
    itl_step = "ItlStep"  # upper: the slowest step stays under the P99 ITL target
    step_threshold = "StepThreshold"  # upper: past the GPU's threshold a step jumps
    ttft_prefill = "TtftPrefill"  # lower: a P99 prompt is prefilled within the TTFT target
    max_num_seqs = "MaxNumSeqs"  # lower: every running sequence needs a token per step
    hidden_prefill = "HiddenPrefill"  # interactive: prefill still hides under the decode read
    midpoint = "Midpoint"  # balanced: halfway from the interactive pick to the upper bound
    prefill_chunk = "PrefillChunk"  # a prefill pool: the smallest chunk near its best price


class SeqsSource(StrEnum):
    """What set max_num_seqs."""

    spec = "Spec"  # the spec's integer
    vllm_default = "VllmDefault"  # vLLM's own cap
    token_budget = "TokenBudget"  # the spec's token budget, smaller than vLLM's cap
    itl = "Itl"  # vLLM's cap lowered: its smallest budget (max_num_seqs tokens) breaks the ITL


class BudgetBound(ApiModel):
    """A bound on the token budget, as data: what it is and where it lies."""

    kind: BoundKind = Field(description="What sets the bound.")
    tokens: int = Field(description="The bound, in tokens per step.")


class TuningStatus(ApiModel):
    """What the operator chose for batching, and why."""

    sku: str = Field(description="The GPU SKU the engine runs on.")
    max_num_batched_tokens: int = Field(description="The per-step token budget in use.")
    max_num_seqs: int = Field(description="Most sequences per step in use.")
    source: BatchingSource = Field(description="Spec, MeasuredProfile or DatasheetProfile.")
    set_by: BudgetBound = Field(description="What set the token budget.")
    max_num_seqs_source: SeqsSource = Field(description="What set maxNumSeqs.")
    lower_bound: BudgetBound | None = Field(None, description="The tuner's lower bound.")
    upper_bound: BudgetBound | None = Field(None, description="The tuner's upper bound.")
    feasible: bool = Field(True, description="False when the SLOs cannot all be met.")
    reason: str = Field(description="Why, in words.")
    # Optional: a status written before these fields existed must stay valid.
    basis: TuningBasis | None = Field(
        None, description="What the tuner planned for: Observed, Hints, Defaults or Spec."
    )
    planned_for: PlannedFor | None = Field(
        None, description="The workload and step costs the budget was planned for."
    )
    retuned_at: str | None = Field(None, description="When the budget was last re-tuned.")
    recommendation: RetuneRecommendation | None = Field(
        None, description="A budget the observed workload calls for that the engines do not run."
    )


class AutoscalingStatus(ApiModel):
    """The autoscaler's last decision."""

    desired_replicas: int = Field(description="Replicas the autoscaler asked for.")
    mode: str = Field(description="steady, scale-up, panic, scale-down or hold.")
    # Optional: a status written before this field existed must stay valid.
    reason_code: str | None = Field(
        None, description="Why, as a code (the Event reason), e.g. ItlOverSlo."
    )
    reason: str = Field(description="Why, in words.")
    last_decision_time: str = Field(description="When (RFC 3339).")


class CalibrationStatus(ApiModel):
    """The last calibration of this service's GPU (written by the calibration writer only)."""

    state: str = Field(description="Running, Succeeded or Failed.")
    job: str | None = Field(None, description="The calibration Job.")
    profile: str | None = Field(None, description="The measured profile it produced or reused.")
    key: str = Field(description="What was calibrated: SKU, model and engine image.")
    request: str | None = Field(
        None, description="The recalibrate annotation's value this calibration answered."
    )
    message: str = Field(description="What happened, in words.")
    progress: str | None = Field(
        None,
        description="While the Job runs: grid points measured of the grid's, e.g. 5/12.",
    )


class PoolState(StrEnum):
    """What a pool of a service is doing."""

    Serving = "Serving"  # its replicas run (or start) where the scheduler can place them
    Idle = "Idle"  # the mix gives it no replicas
    SpilledOver = "SpilledOver"  # its pods could not be placed: its share runs on other pools


class PoolStatus(ApiModel):
    """One GPU pool of the service as the reconciler last rendered and saw it."""

    sku: str = Field(description="The pool's GPU SKU.")
    role: str | None = Field(
        None, description="`prefill` or `decode` in a disaggregated service; else unset."
    )
    deployment: str = Field(description="The pool's Deployment.")
    replicas: int = Field(description="Replicas the mix gives it.")
    ready_replicas: int = Field(0, description="Of them, Ready.")
    max_num_batched_tokens: int = Field(description="Its engines' token budget.")
    max_num_seqs: int = Field(description="Its engines' maxNumSeqs.")
    requests_per_s_per_replica: float | None = Field(
        None, description="What one replica serves within the SLOs, for the planned workload."
    )
    price_per_replica_hour: float | None = Field(
        None, description="pricePerGpuHour times its GPUs per replica."
    )
    state: PoolState = Field(description="Serving, Idle or SpilledOver.")
    spilled_since: str | None = Field(None, description="When it spilled over (RFC 3339).")
    spilled_because: str | None = Field(
        None, description="Why it spilled over: the scheduler's words for its pod."
    )
    reason: str = Field(description="Why it has these replicas, in words.")


class PhaseScalingStatus(ApiModel):
    """The autoscaler's view of one pool of a disaggregated service."""

    autoscaling: AutoscalingStatus | None = Field(None, description="Its last decision.")
    workload: WorkloadStatus | None = Field(
        None, description="The traffic its engines served, from their own metrics."
    )
    engine_costs: EngineCostsStatus | None = Field(
        None, description="What its engines' steps cost, term by term, against the step model."
    )


class PhasesScalingStatus(ApiModel):
    """Each pool of a disaggregated service, scaled on its own signal (written by the
    autoscaler, one field manager per pool)."""

    prefill: PhaseScalingStatus | None = Field(None, description="The prefill pool.")
    decode: PhaseScalingStatus | None = Field(None, description="The decode pool.")
    split_pays: bool | None = Field(
        None,
        description="Whether the split pays for the mix the pools are sized for, against one "
        "pool on the prefill pool's GPU (as `tokenpilot plan --disaggregate` says).",
    )
    verdict: str | None = Field(None, description="Why, in words, with each way's price.")


class LLMServiceStatus(ApiModel):
    """What the operator observed."""

    observed_generation: int | None = Field(None, description="Generation last reconciled.")
    phase: Phase = Field(Phase.Pending, description="Pending|Progressing|Ready|Degraded|Infeasible")
    replicas: int = Field(0, description="Engine pods that exist (scale subresource).")
    ready_replicas: int = Field(0, description="Engine pods that are ready.")
    selector: str | None = Field(None, description="Label selector of the engine pods.")
    endpoint: str | None = Field(None, description="OpenAI base URL inside the cluster.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded, Infeasible (the reconciler's); "
        "MetricsAvailable, PaceAsProfiled (the autoscaler's; in a disaggregated service one "
        "each per pool, e.g. PrefillMetricsAvailable).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    tuning: TuningStatus | None = Field(None, description="Batching choices and their reason.")
    pools: list[PoolStatus] | None = Field(
        None,
        description="Per GPU pool (spec.accelerator.pools): replicas, budget, capacity, cost.",
    )
    pools_summary: str | None = Field(
        None, description="The pools' ready/replicas in one line, for kubectl get."
    )
    autoscaling: AutoscalingStatus | None = Field(None, description="Last autoscaling decision.")
    workload: WorkloadStatus | None = Field(
        None, description="The traffic the engines served, from their own metrics."
    )
    engine_costs: EngineCostsStatus | None = Field(
        None, description="What the engines' steps cost, term by term, against the step model."
    )
    phases: PhasesScalingStatus | None = Field(
        None, description="A disaggregated service's pools as the autoscaler scales them."
    )
    calibration: CalibrationStatus | None = Field(None, description="The last calibration.")


class ObjectMeta(ApiModel):
    """The few metadata fields the operator reads."""

    model_config = ConfigDict(extra="ignore")

    name: str
    namespace: str = "default"
    uid: str = ""
    generation: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class LLMService(ApiModel):
    """The whole object as the operator receives it."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["serving.tokenpilot.dev/v1alpha1"] = "serving.tokenpilot.dev/v1alpha1"
    kind: Literal["LLMService"] = "LLMService"
    metadata: ObjectMeta
    spec: LLMServiceSpec
    status: LLMServiceStatus = Field(default_factory=LLMServiceStatus)
