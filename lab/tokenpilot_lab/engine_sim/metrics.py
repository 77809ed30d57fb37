"""vLLM's Prometheus families, filled from engine steps and finished requests.

The families come from `tokenpilot.core.vllm_metrics`, so names, types, labels and bucket edges
are the table's. Times observed are engine (virtual) seconds: under `--time-scale` the
histograms show what the modelled GPU would show. With `--rates-in-engine-time` the rates agree
with them too: every count (counters, and each histogram's buckets, count and sum) is exported
times 1 / time-scale, so a rate over wall-clock seconds is the modelled GPU's rate per engine
second. A reader that relates the two (the autoscaler's capacity model and its measured pace)
needs it: without it, at a time-scale of 0.1 it sees H100 latencies at a tenth of an H100's
throughput, which it reads as engines slower than their profile. Off by default, so that a
test running faster than real time reads the counts it served.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from tokenpilot.core import vllm_metrics as vm
from tokenpilot.core.roofline import StepWork
from tokenpilot_lab.sim import RequestStats, StepResult

_ENGINE_INDEX = "0"


class EngineMetrics:
    """One registry per server, labelled with the served model name and engine 0."""

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        rates_time_scale: float = 1.0,
        *,
        histogram_buckets: Mapping[str, Sequence[float]] | None = None,
        work: StepWork | None = None,
    ) -> None:
        # With --enable-mfu-metrics: each step's work, counted as vLLM estimates it.
        self.work = work
        self.registry = CollectorRegistry(auto_describe=True)
        self._exported = (
            self.registry
            if rates_time_scale == 1.0
            else _EngineTimeRates(self.registry, rates_time_scale)
        )
        self.model_name = model_name
        counters: dict[str, Counter] = {}
        gauges: dict[str, Gauge] = {}
        histograms: dict[str, Histogram] = {}
        for family in vm.FAMILIES:
            common = {
                "name": family.name,
                "documentation": family.documentation,
                "labelnames": family.label_names,
                "registry": self.registry,
            }
            metric: Counter | Gauge | Histogram
            if family.type is vm.MetricType.counter:
                metric = counters[family.name] = Counter(**common)  # type: ignore[arg-type]
            elif family.type is vm.MetricType.gauge:
                metric = gauges[family.name] = Gauge(**common)  # type: ignore[arg-type]
            else:
                edges = family.bucket_edges(max_model_len, histogram_buckets)
                metric = histograms[family.name] = Histogram(buckets=edges, **common)  # type: ignore[arg-type]
            self._create_series(family, metric)
        self._cache_config_info = gauges["vllm:cache_config_info"]
        labels = (model_name, _ENGINE_INDEX)

        def counter(name: str) -> Counter:
            return counters[name].labels(*labels)

        def gauge(name: str) -> Gauge:
            return gauges[name].labels(*labels)

        def histogram(name: str) -> Histogram:
            return histograms[name].labels(*labels)

        self.running = gauge(vm.NUM_REQUESTS_RUNNING)
        self.waiting = gauge(vm.NUM_REQUESTS_WAITING)
        self.waiting_capacity = gauges["vllm:num_requests_waiting_by_reason"].labels(
            *labels, "capacity"
        )
        self.kv_usage = gauge(vm.KV_CACHE_USAGE_PERC)
        self.preemptions = counter(vm.NUM_PREEMPTIONS)
        self.prompt_tokens = counter(vm.PROMPT_TOKENS)
        self.prompt_tokens_computed = counters["vllm:prompt_tokens_by_source"].labels(
            *labels, "local_compute"
        )
        self.prompt_tokens_cache_hit = counters["vllm:prompt_tokens_by_source"].labels(
            *labels, "local_cache_hit"
        )
        self.prompt_tokens_cached = counter("vllm:prompt_tokens_cached")
        self.prompt_tokens_cached_device = counters["vllm:prompt_tokens_cached_by_source"].labels(
            *labels, "device"
        )
        self.prefix_cache_queries = counter("vllm:prefix_cache_queries")
        self.prefix_cache_hits = counter("vllm:prefix_cache_hits")
        self.external_queries = counter("vllm:external_prefix_cache_queries")
        self.external_hits = counter("vllm:external_prefix_cache_hits")
        self.generation_tokens = counter(vm.GENERATION_TOKENS)
        self.iteration_tokens = histogram(vm.ITERATION_TOKENS_TOTAL)
        self.flops = counter("vllm:estimated_flops_per_gpu")
        self.read_bytes = counter("vllm:estimated_read_bytes_per_gpu")
        self.write_bytes = counter("vllm:estimated_write_bytes_per_gpu")
        self.ttft = histogram(vm.TIME_TO_FIRST_TOKEN_SECONDS)
        self.itl = histogram(vm.INTER_TOKEN_LATENCY_SECONDS)
        self.tpot = histogram(vm.REQUEST_TIME_PER_OUTPUT_TOKEN_SECONDS)
        self.e2e = histogram(vm.E2E_REQUEST_LATENCY_SECONDS)
        self.queue = histogram(vm.REQUEST_QUEUE_TIME_SECONDS)
        self.inference = histogram("vllm:request_inference_time_seconds")
        self.prefill = histogram("vllm:request_prefill_time_seconds")
        self.decode = histogram("vllm:request_decode_time_seconds")
        self.req_prompt = histogram("vllm:request_prompt_tokens")
        self.req_generation = histogram("vllm:request_generation_tokens")
        self.req_max_generation = histogram("vllm:request_max_num_generation_tokens")
        self.req_max_tokens = histogram("vllm:request_params_max_tokens")
        self.req_n = histogram("vllm:request_params_n")
        self.req_preemptions = histogram("vllm:request_num_preemptions")
        self.req_kv_computed = histogram("vllm:request_prefill_kv_computed_tokens")
        self.success = {
            reason: counters[vm.REQUEST_SUCCESS].labels(*labels, reason)
            for reason in vm.FINISHED_REASONS
        }
        gauges["vllm:engine_sleep_state"].labels(*labels, "awake").set(1)

    def _create_series(self, family: vm.MetricFamily, metric: Counter | Gauge | Histogram) -> None:
        """Create the series vLLM shows from the start, so every family has samples at zero."""
        if family.name == "vllm:cache_config_info":
            return  # set once the KV cache is sized, see set_cache_config
        fixed = {"model_name": self.model_name, "engine": _ENGINE_INDEX}
        base = {name: fixed[name] for name in family.label_names if name in fixed}
        if not family.label_values:
            metric.labels(**base)
            return
        for label, values in family.label_values:
            for value in values:
                metric.labels(**base, **{label: value})

    def set_cache_config(self, info: dict[str, str]) -> None:
        """The cache_config_info series: every label vLLM has, "None" where we have nothing."""
        values = {name: "None" for name in vm.CACHE_CONFIG_INFO_LABELS}
        values.update(info)
        values["engine"] = _ENGINE_INDEX
        self._cache_config_info.labels(**values).set(1)

    def observe_step(
        self,
        result: StepResult,
        itl_s: list[float],
        ttft_s: list[float],
        num_prompt_tokens_done: int,
        num_cached_tokens_done: int = 0,
    ) -> None:
        """Record one step: its tokens, the gaps and first tokens it produced, and the prefix
        cache lookups of the sequences it admitted (vLLM counts them in tokens at admission;
        prompt tokens by source at the first token)."""
        # As vLLM counts it: the prompts that finished prefill in this step (whole, not the
        # chunk scheduled now) plus the tokens sampled; not the step's batch size.
        self.iteration_tokens.observe(num_prompt_tokens_done + len(result.emitted))
        self.generation_tokens.inc(len(result.emitted))
        self.prompt_tokens.inc(num_prompt_tokens_done)
        self.prompt_tokens_computed.inc(num_prompt_tokens_done - num_cached_tokens_done)
        if num_cached_tokens_done:
            self.prompt_tokens_cache_hit.inc(num_cached_tokens_done)
            self.prompt_tokens_cached.inc(num_cached_tokens_done)
            self.prompt_tokens_cached_device.inc(num_cached_tokens_done)
        if result.num_prefix_cache_queries:
            self.prefix_cache_queries.inc(result.num_prefix_cache_queries)
            self.prefix_cache_hits.inc(result.num_prefix_cache_hits)
        if result.preempted:
            self.preemptions.inc(len(result.preempted))
        if self.work is not None:
            # Per GPU: the linear layers' 2 x parameters per token, the weights read once a step,
            # each new token's KV written.
            tokens = result.num_prefill_tokens + result.num_decode_tokens
            self.flops.inc(self.work.flops_per_token * tokens)
            self.read_bytes.inc(self.work.weight_bytes)
            self.write_bytes.inc(self.work.kv_bytes_per_token * tokens)
        for gap in itl_s:
            self.itl.observe(gap)
        for ttft in ttft_s:
            self.ttft.observe(ttft)

    def observe_handed_over(self, num_prompt_tokens: int, num_handed_over: int) -> None:
        """A prompt whose KV came from a prefill engine, counted as vLLM counts a KV
        connector's: looked up there in tokens, and found."""
        self.external_queries.inc(num_prompt_tokens)
        self.external_hits.inc(num_handed_over)

    def observe_finished(self, stats: RequestStats, max_tokens: int) -> None:
        self.success.get(stats.finish_reason, self.success["stop"]).inc()
        self.e2e.observe(stats.e2e_s)
        self.queue.observe(stats.queue_s)
        self.inference.observe(stats.finish_s - stats.first_scheduled_s)
        self.prefill.observe(stats.first_token_s - stats.first_scheduled_s)
        self.decode.observe(stats.finish_s - stats.first_token_s)
        self.tpot.observe(stats.tpot_s)
        self.req_prompt.observe(stats.num_prompt_tokens)
        self.req_generation.observe(stats.num_output_tokens)
        self.req_max_generation.observe(max_tokens)
        self.req_max_tokens.observe(max_tokens)
        self.req_n.observe(1)
        self.req_preemptions.observe(stats.num_preemptions)
        self.req_kv_computed.observe(stats.num_prompt_tokens - stats.num_cached_tokens)

    def observe_aborted(self) -> None:
        self.success["abort"].inc()

    def set_gauges(self, num_running: int, num_waiting: int, kv_cache_usage: float) -> None:
        self.running.set(num_running)
        self.waiting.set(num_waiting)
        self.waiting_capacity.set(num_waiting)
        self.kv_usage.set(kv_cache_usage)

    def exposition(self) -> bytes:
        return generate_latest(self._exported)


# The samples of a counter or a histogram that count (the _created timestamps do not).
_COUNTING = ("_total", "_bucket", "_count", "_sum")


class _EngineTimeRates:
    """`registry` with every count times 1 / `time_scale` (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry, time_scale: float) -> None:
        self.registry = registry
        self.factor = 1.0 / time_scale

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if family.type in ("counter", "histogram"):
                family.samples = [
                    s._replace(value=s.value * self.factor) if s.name.endswith(_COUNTING) else s
                    for s in family.samples
                ]
            yield family
