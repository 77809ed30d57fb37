"""vLLM's Prometheus metric families as data: names, types, label names and bucket edges.

The engine simulator exposes these, the scrape adapter and the autoscaler read them, and the
fleet simulator fills the same histograms, so one table keeps them all equal to real vLLM
(the V1 engine's `PrometheusStatLogger`). The compatibility test checks this table against a
/metrics page captured from real vLLM.

Names are family names as Prometheus' client registers them: a counter `vllm:prompt_tokens`
is exposed as the sample `vllm:prompt_tokens_total`.
"""

from __future__ import annotations

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

    def bucket_edges(self, max_model_len: int) -> tuple[float, ...]:
        if self.buckets_up_to_max_model_len:
            return tuple(float(b) for b in buckets_1_2_5(max_model_len))
        return self.buckets


ENGINE_LABELS = ("model_name", "engine")
FINISHED_REASON_LABEL = "finished_reason"
# vLLM's FinishReason values, as they appear in request_success{finished_reason=...}.
FINISHED_REASONS = ("stop", "length", "abort")

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
    extra_labels: tuple[str, ...] = (),
    by_max_model_len: bool = False,
) -> MetricFamily:
    return MetricFamily(
        name=name,
        type=kind,
        documentation=documentation,
        label_names=ENGINE_LABELS + extra_labels,
        buckets=buckets,
        buckets_up_to_max_model_len=by_max_model_len,
    )


_C, _G, _H = MetricType.counter, MetricType.gauge, MetricType.histogram

FAMILIES: tuple[MetricFamily, ...] = (
    _family("vllm:num_requests_running", _G, "Number of requests in model execution batches."),
    _family("vllm:num_requests_waiting", _G, "Number of requests waiting to be processed."),
    _family("vllm:kv_cache_usage_perc", _G, "KV-cache usage. 1 means 100 percent usage."),
    _family(
        "vllm:prefix_cache_queries",
        _C,
        "Prefix cache queries, in terms of number of queried tokens.",
    ),
    _family(
        "vllm:prefix_cache_hits", _C, "Prefix cache hits, in terms of number of cached tokens."
    ),
    _family("vllm:num_preemptions", _C, "Cumulative number of preemption from the engine."),
    _family("vllm:prompt_tokens", _C, "Number of prefill tokens processed."),
    _family("vllm:generation_tokens", _C, "Number of generation tokens processed."),
    _family(
        "vllm:request_success",
        _C,
        "Count of successfully processed requests.",
        extra_labels=(FINISHED_REASON_LABEL,),
    ),
    _family(
        "vllm:request_prompt_tokens",
        _H,
        "Number of prefill tokens processed.",
        by_max_model_len=True,
    ),
    _family(
        "vllm:request_generation_tokens",
        _H,
        "Number of generation tokens processed.",
        by_max_model_len=True,
    ),
    _family(
        "vllm:iteration_tokens_total",
        _H,
        "Histogram of number of tokens per engine_step.",
        ITERATION_TOKENS_BUCKETS,
    ),
    _family(
        "vllm:request_max_num_generation_tokens",
        _H,
        "Histogram of maximum number of requested generation tokens.",
        by_max_model_len=True,
    ),
    _family("vllm:request_params_n", _H, "Histogram of the n request parameter.", PARAMS_N_BUCKETS),
    _family(
        "vllm:request_params_max_tokens",
        _H,
        "Histogram of the max_tokens request parameter.",
        by_max_model_len=True,
    ),
    _family(
        "vllm:time_to_first_token_seconds",
        _H,
        "Histogram of time to first token in seconds.",
        TTFT_BUCKETS_S,
    ),
    _family(
        "vllm:inter_token_latency_seconds",
        _H,
        "Histogram of inter-token latency in seconds.",
        TOKEN_LATENCY_BUCKETS_S,
    ),
    _family(
        "vllm:request_time_per_output_token_seconds",
        _H,
        "Histogram of time_per_output_token_seconds per request.",
        TOKEN_LATENCY_BUCKETS_S,
    ),
    _family(
        "vllm:e2e_request_latency_seconds",
        _H,
        "Histogram of e2e request latency in seconds.",
        REQUEST_LATENCY_BUCKETS_S,
    ),
    _family(
        "vllm:request_queue_time_seconds",
        _H,
        "Histogram of time spent in WAITING phase for request.",
        REQUEST_LATENCY_BUCKETS_S,
    ),
    _family(
        "vllm:request_inference_time_seconds",
        _H,
        "Histogram of time spent in RUNNING phase for request.",
        REQUEST_LATENCY_BUCKETS_S,
    ),
    _family(
        "vllm:request_prefill_time_seconds",
        _H,
        "Histogram of time spent in PREFILL phase for request.",
        REQUEST_LATENCY_BUCKETS_S,
    ),
    _family(
        "vllm:request_decode_time_seconds",
        _H,
        "Histogram of time spent in DECODE phase for request.",
        REQUEST_LATENCY_BUCKETS_S,
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
