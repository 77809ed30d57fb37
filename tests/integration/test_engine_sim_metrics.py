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
