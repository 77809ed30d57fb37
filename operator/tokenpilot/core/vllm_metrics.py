"""vLLM's Prometheus metric families as data: names, types, label names and bucket edges.

The engine simulator exposes these, the scrape adapter and the autoscaler read them, and the
fleet simulator fills the same histograms, so one table keeps them all equal to real vLLM
(the V1 engine's Prometheus logger, as of vLLM 0.32.0). The compatibility test checks this
table against a /metrics page captured from that vLLM (tests/fixtures/vllm-metrics-0.32.0.txt).
HELP texts are our own words; Prometheus does not match on them.

Names are family names as Prometheus' client registers them: a counter `vllm:prompt_tokens`
is exposed as the sample `vllm:prompt_tokens_total`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class MetricType(StrEnum):
    counter = "counter"
    gauge = "gauge"
    histogram = "histogram"


@dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    type: MetricType
    documentation: str
    label_names: tuple[str, ...]
    # Upper bucket edges without +Inf; empty for counters and gauges. Families whose edges
    # depend on max_model_len (1-2-5 series) have `buckets_up_to_max_model_len` set instead.
    buckets: tuple[float, ...] = ()
    buckets_up_to_max_model_len: bool = False
    # The values vLLM creates a series for at start, for labels beyond model_name and engine.
    label_values: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def bucket_edges(
        self, max_model_len: int, overrides: Mapping[str, Sequence[float]] | None = None
    ) -> tuple[float, ...]:
        """The family's edges: vLLM's defaults, or the engine's `--custom-histogram-buckets`
        for its bucket family (vLLM's `vllm/v1/metrics/buckets.py`: one list per family
        replaces the defaults of every histogram in it)."""
        family = BUCKET_FAMILY.get(self.name)
        if overrides and family is not None and family in overrides:
            return tuple(float(b) for b in overrides[family])
        if self.buckets_up_to_max_model_len:
            return tuple(float(b) for b in buckets_1_2_5(max_model_len))
        return self.buckets


ENGINE_LABELS = ("model_name", "engine")
FINISHED_REASON_LABEL = "finished_reason"
# vLLM's FinishReason values, as they appear in request_success{finished_reason=...}.
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")

TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TOKEN_LATENCY_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKENS_BUCKETS = (
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
)  # fmt: skip
PARAMS_N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
REQUEST_NUM_PREEMPTIONS_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)


def buckets_1_2_5(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to and including max_value (token-count histograms)."""
    edges: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * scale
            if value > max_value:
                return edges
            edges.append(value)
        scale *= 10


def _family(
    name: str,
    kind: MetricType,
    documentation: str,
    buckets: tuple[float, ...] = (),
    *,
    labels: tuple[str, ...] = ENGINE_LABELS,
    values: tuple[tuple[str, tuple[str, ...]], ...] = (),
    by_max_model_len: bool = False,
) -> MetricFamily:
    return MetricFamily(
        name=name,
        type=kind,
        documentation=documentation,
        label_names=labels + tuple(label for label, _ in values),
        buckets=buckets,
        buckets_up_to_max_model_len=by_max_model_len,
        label_values=values,
    )


_C, _G, _H = MetricType.counter, MetricType.gauge, MetricType.histogram
_LATENCY = REQUEST_LATENCY_BUCKETS_S

# vLLM's cache_config_info labels (0.32.0), one series set to 1 describing the KV cache.
CACHE_CONFIG_INFO_LABELS = (
    "_block_size_resolved", "block_size", "cache_dtype", "cache_hit_alignment_tokens",
    "effective_attention_block_size", "enable_mamba_shared_prefix_checkpoint",
    "enable_prefix_caching", "engine", "gpu_memory_utilization", "hash_block_size",
    "is_attention_free", "kv_cache_dtype_skip_layers", "kv_cache_layout",
    "kv_cache_max_concurrency", "kv_cache_memory_bytes", "kv_cache_size_tokens",
    "kv_offloading_backend", "kv_offloading_size", "kv_sharing_fast_prefill", "mamba_block_size",
    "mamba_cache_dtype", "mamba_cache_mode", "mamba_page_size_padded", "mamba_ssm_cache_dtype",
    "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override",
    "prefix_cache_retention_interval", "prefix_caching_hash_algo", "prefix_match_unit",
    "replayssm_buffer_len", "skip_page_size_padded", "sliding_window", "swa_bounded_replay",
    "use_kda_recoverssm", "use_replayssm", "user_specified_block_size",
)  # fmt: skip

FAMILIES: tuple[MetricFamily, ...] = (
    _family("vllm:estimated_flops_per_gpu", _C, "Estimated FLOPs done per GPU."),
    _family("vllm:estimated_read_bytes_per_gpu", _C, "Estimated bytes read per GPU."),
    _family("vllm:estimated_write_bytes_per_gpu", _C, "Estimated bytes written per GPU."),
    _family("vllm:num_requests_running", _G, "Requests in the running batch."),
    _family("vllm:num_requests_waiting", _G, "Requests queued, not yet running."),
    _family(
        "vllm:num_requests_waiting_by_reason",
        _G,
        "Queued requests by why they wait.",
        values=(("reason", ("capacity", "deferred")),),
    ),
    _family(
        "vllm:engine_sleep_state",
        _G,
        "1 for the engine's current sleep state, 0 for the others.",
        values=(("sleep_state", ("awake", "weights_offloaded", "discard_all")),),
    ),
    _family("vllm:kv_cache_usage_perc", _G, "Fraction of KV cache blocks in use (1 = full)."),
    _family("vllm:prefix_cache_queries", _C, "Tokens looked up in the prefix cache."),
    _family("vllm:prefix_cache_hits", _C, "Tokens found in the prefix cache."),
    _family("vllm:external_prefix_cache_queries", _C, "Tokens looked up in a KV connector."),
    _family("vllm:external_prefix_cache_hits", _C, "Tokens found through a KV connector."),
    _family("vllm:mm_cache_queries", _C, "Multi-modal cache lookups."),
    _family("vllm:mm_cache_hits", _C, "Multi-modal cache hits."),
    _family("vllm:num_preemptions", _C, "Sequences preempted so far."),
    _family("vllm:prompt_tokens", _C, "Prompt tokens prefilled."),
    _family(
        "vllm:prompt_tokens_by_source",
        _C,
        "Prompt tokens by where their KV came from.",
        values=(("source", ("local_compute", "local_cache_hit", "external_kv_transfer")),),
    ),
    _family("vllm:prompt_tokens_cached", _C, "Prompt tokens served from a cache."),
    _family(
        "vllm:prompt_tokens_cached_by_source",
        _C,
        "Cached prompt tokens by cache tier.",
        values=(("source", ("device", "host", "p2p", "disk", "external_unspecified")),),
    ),
    _family("vllm:generation_tokens", _C, "Output tokens generated."),
    _family(
        "vllm:request_success",
        _C,
        "Finished requests by finish reason.",
        values=((FINISHED_REASON_LABEL, FINISHED_REASONS),),
    ),
    _family(
        "vllm:admission_rejections",
        _C,
        "Requests refused by a queue limit, by limit.",
        labels=("model_name",),
        values=(("reason", ("max_num_queued_reqs", "max_num_queued_tokens")),),
    ),
    _family("vllm:request_prompt_tokens", _H, "Prompt tokens per request.", by_max_model_len=True),
    _family(
        "vllm:request_generation_tokens", _H, "Output tokens per request.", by_max_model_len=True
    ),
    _family("vllm:iteration_tokens_total", _H, "Tokens per engine step.", ITERATION_TOKENS_BUCKETS),
    _family(
        "vllm:request_max_num_generation_tokens",
        _H,
        "Most output tokens a request asked for.",
        by_max_model_len=True,
    ),
    _family("vllm:request_params_n", _H, "The n parameter of requests.", PARAMS_N_BUCKETS),
    _family(
        "vllm:request_params_max_tokens",
        _H,
        "The max_tokens parameter of requests.",
        by_max_model_len=True,
    ),
    _family("vllm:time_to_first_token_seconds", _H, "Seconds to the first token.", TTFT_BUCKETS_S),
    _family(
        "vllm:inter_token_latency_seconds",
        _H,
        "Seconds between consecutive output tokens.",
        TOKEN_LATENCY_BUCKETS_S,
    ),
    _family(
        "vllm:request_time_per_output_token_seconds",
        _H,
        "Mean seconds per output token after the first, per request.",
        TOKEN_LATENCY_BUCKETS_S,
    ),
    _family("vllm:e2e_request_latency_seconds", _H, "Seconds from arrival to finish.", _LATENCY),
    _family("vllm:request_queue_time_seconds", _H, "Seconds queued before running.", _LATENCY),
    _family("vllm:request_inference_time_seconds", _H, "Seconds running.", _LATENCY),
    _family("vllm:request_prefill_time_seconds", _H, "Seconds in prefill.", _LATENCY),
    _family("vllm:request_decode_time_seconds", _H, "Seconds in decode.", _LATENCY),
    _family(
        "vllm:request_num_preemptions",
        _H,
        "Preemptions per request.",
        REQUEST_NUM_PREEMPTIONS_BUCKETS,
    ),
    _family(
        "vllm:request_prefill_kv_computed_tokens",
        _H,
        "Prompt tokens whose KV was computed (not cached), per request.",
        by_max_model_len=True,
    ),
    _family(
        "vllm:cache_config_info",
        _G,
        "The KV cache configuration, as labels on a series set to 1.",
        labels=CACHE_CONFIG_INFO_LABELS,
    ),
)

BY_NAME: dict[str, MetricFamily] = {family.name: family for family in FAMILIES}

# Names the autoscaler and dashboards use, so a rename is one edit.
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
TIME_TO_FIRST_TOKEN_SECONDS = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY_SECONDS = "vllm:inter_token_latency_seconds"
REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS = "vllm:request_time_per_output_token_seconds"
E2E_REQUEST_LATENCY_SECONDS = "vllm:e2e_request_latency_seconds"
REQUEST_QUEUE_TIME_SECONDS = "vllm:request_queue_time_seconds"
ITERATION_TOKENS_TOTAL = "vllm:iteration_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
NUM_PREEMPTIONS = "vllm:num_preemptions"
REQUEST_SUCCESS = "vllm:request_success"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
REQUEST_PREFILL_TIME_SECONDS = "vllm:request_prefill_time_seconds"

# Each histogram's bucket family in vLLM 0.32 (vllm/v1/metrics/loggers.py): the key a
# `--custom-histogram-buckets` entry names to replace the defaults of all its histograms.
BUCKET_FAMILY: dict[str, str] = {
    "vllm:request_prompt_tokens": "request_tokens",
    "vllm:request_generation_tokens": "request_tokens",
    "vllm:request_max_num_generation_tokens": "request_tokens",
    "vllm:request_params_max_tokens": "request_tokens",
    "vllm:request_prefill_kv_computed_tokens": "request_tokens",
    "vllm:iteration_tokens_total": "iteration_tokens",
    "vllm:request_params_n": "request_params_n",
    "vllm:time_to_first_token_seconds": "time_to_first_token",
    "vllm:inter_token_latency_seconds": "inter_token_latency",
    "vllm:request_time_per_output_token_seconds": "inter_token_latency",
    "vllm:e2e_request_latency_seconds": "request_latency",
    "vllm:request_queue_time_seconds": "request_latency",
    "vllm:request_inference_time_seconds": "request_latency",
    "vllm:request_prefill_time_seconds": "request_latency",
    "vllm:request_decode_time_seconds": "request_latency",
    "vllm:request_num_preemptions": "request_num_preemptions",
}
# Token-count edges a P99 can be read from to within this share: each edge at most this much
# over the one below it, from `TOKEN_EDGE_FINE_FROM` tokens up (powers of two below it).
TOKEN_EDGE_RATIO = 1.1
TOKEN_EDGE_FINE_FROM = 64


def token_edges(max_model_len: int) -> tuple[float, ...]:
    """Edges for the request_tokens family: 1, 2, 4 ... 64, then each at most 10 % over the
    last (whole tokens), ending at maxModelLen. A P99 read from them is known to within its
    bucket, under 10 % of its edge from 64 tokens up."""
    edges = [float(e) for e in (1, 2, 4, 8, 16, 32, 64) if e < max_model_len]
    edge = float(TOKEN_EDGE_FINE_FROM)
    while edge < max_model_len:
        edge = float(min(max_model_len, max(edge + 1, math.floor(edge * TOKEN_EDGE_RATIO))))
        edges.append(edge)
    if not edges or edges[-1] != max_model_len:
        edges.append(float(max_model_len))
    return tuple(edges)


def with_edge(edges: Sequence[float], edge: float | None) -> tuple[float, ...]:
    """`edges` with `edge` among them (an SLO: attainment is then read exactly)."""
    if edge is None or edge in edges:
        return tuple(edges)
    return tuple(sorted((*edges, edge)))


def rendered_buckets(
    max_model_len: int, *, itl_p99_slo_s: float | None, ttft_p99_slo_s: float | None
) -> dict[str, list[float]]:
    """The `--custom-histogram-buckets` the operator gives its engines: token counts fine enough
    for the tuner's P99s (`token_edges`), and vLLM's latency edges with the service's SLOs
    among them."""
    return {
        "request_tokens": list(token_edges(max_model_len)),
        "time_to_first_token": list(with_edge(TTFT_BUCKETS_S, ttft_p99_slo_s)),
        "inter_token_latency": list(with_edge(TOKEN_LATENCY_BUCKETS_S, itl_p99_slo_s)),
    }


def buckets_flag(buckets: Mapping[str, Sequence[float]]) -> str:
    """`buckets` as `--custom-histogram-buckets` takes them: one JSON object, compact."""
    return json.dumps(
        {k: [float(v) for v in vs] for k, vs in buckets.items()}, separators=(",", ":")
    )


def extra_series(max_model_len: int, buckets: Mapping[str, Sequence[float]]) -> int:
    """Series per engine the custom buckets add over vLLM's defaults: one per extra edge, per
    histogram of the family."""
    extra = 0
    for family in FAMILIES:
        key = BUCKET_FAMILY.get(family.name)
        if family.type is MetricType.histogram and key is not None and key in buckets:
            extra += len(buckets[key]) - len(family.bucket_edges(max_model_len))
    return extra
