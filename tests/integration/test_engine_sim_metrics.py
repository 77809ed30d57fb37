"""engine-sim's /metrics against real vLLM's: same families, types, label names and buckets.

The reference is a /metrics page captured from vLLM 0.32.0 (CPU build) after a few requests,
committed as a fixture with its version (the engine tier checks it against live vLLM). Both
pages are compared with `tokenpilot_lab.metrics_schema` over the `vllm:` families; process_*,
python_* and http_* families are the web server's, not the engine's.
"""

from __future__ import annotations

import math
from pathlib import Path

import httpx

from tokenpilot.core import vllm_metrics
from tokenpilot_lab.engine_sim.server import ServedModel, running
from tokenpilot_lab.metrics_schema import metrics_schema, schema_differences
from tokenpilot_lab.sim import EngineConfig

FIXTURE = Path(__file__).parents[1] / "fixtures" / "vllm-metrics-0.32.0.txt"
# The fixture's server ran with --max-model-len 1024 (its header says so).
FIXTURE_MAX_MODEL_LEN = 1024


class Timer:
    def iteration_s(
        self, num_decodes: int, decode_context_tokens: int, prefill_chunks: object = ()
    ) -> float:
        return 0.005


async def engine_sim_metrics() -> str:
    config = EngineConfig(num_kv_blocks=4096, max_model_len=FIXTURE_MAX_MODEL_LEN)
    served = ServedModel(("tiny",), "tiny", FIXTURE_MAX_MODEL_LEN)
    async with (
        running(config, Timer(), served, time_scale=50.0) as (server, url),
        httpx.AsyncClient(base_url=url, timeout=30.0) as client,
    ):
        server.metrics.set_cache_config({"block_size": "16", "num_gpu_blocks": "4096"})
        for stream in (False, True):
            body = {"prompt": "hello there", "max_tokens": 8, "stream": stream}
            assert (await client.post("/v1/completions", json=body)).status_code == 200
        return (await client.get("/metrics")).text


async def test_every_vllm_family_matches_real_vllm() -> None:
    expected = metrics_schema(FIXTURE.read_text())
    actual = metrics_schema(await engine_sim_metrics())
    assert schema_differences(expected, actual) == []


def test_the_table_others_read_is_the_one_served() -> None:
    expected = metrics_schema(FIXTURE.read_text())
    for family in vllm_metrics.FAMILIES:
        theirs = expected[family.name]
        assert family.type.value == theirs.type, family.name
        assert frozenset(family.label_names) == theirs.label_names, family.name
        edges = family.bucket_edges(FIXTURE_MAX_MODEL_LEN)
        expected_edges = (*edges, math.inf) if edges else ()
        assert expected_edges == theirs.bucket_edges, family.name
    created = {name for name in expected if name.endswith("_created")}
    assert {f.name for f in vllm_metrics.FAMILIES} == set(expected) - created


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "engine"))
            out[(sample.name, labels)] = sample.value
    return out


async def prefix_cache_metrics(enable_prefix_caching: bool) -> dict[str, float]:
    """Two chat requests with the same long system prompt, one after the other."""
    config = EngineConfig(
        num_kv_blocks=4096, max_model_len=4096, enable_prefix_caching=enable_prefix_caching
    )
    served = ServedModel(("tiny",), "tiny", config.max_model_len)
    system = {"role": "system", "content": "You answer questions about the fleet. " * 60}
    async with (
        running(config, Timer(), served, time_scale=50.0) as (_, url),
        httpx.AsyncClient(base_url=url, timeout=30.0) as client,
    ):
        for question in ("How many replicas?", "What budget?"):
            body = {"messages": [system, {"role": "user", "content": question}], "max_tokens": 2}
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        page = samples((await client.get("/metrics")).text)
    model = (("model_name", "tiny"),)

    def by_source(source: str) -> float:
        return page[("vllm:prompt_tokens_by_source_total", (*model, ("source", source)))]

    return {
        "queries": page[("vllm:prefix_cache_queries_total", model)],
        "hits": page[("vllm:prefix_cache_hits_total", model)],
        "prompt": page[("vllm:prompt_tokens_total", model)],
        "computed": by_source("local_compute"),
        "cache_hit": by_source("local_cache_hit"),
        "cached": page[("vllm:prompt_tokens_cached_total", model)],
    }


async def test_prefix_cache_hits_are_reported_as_vllm_reports_them() -> None:
    on = await prefix_cache_metrics(True)
    # The second request finds the system prompt's full blocks (the first found nothing).
    assert on["queries"] == on["prompt"]
    assert 0 < on["hits"] < on["prompt"] / 2
    assert on["hits"] % 16 == 0
    assert on["cache_hit"] == on["cached"] == on["hits"]
    assert on["computed"] + on["cache_hit"] == on["prompt"]
    off = await prefix_cache_metrics(False)
    assert off["queries"] == off["hits"] == off["cache_hit"] == 0
    assert off["computed"] == off["prompt"] == on["prompt"]
