"""engine-sim's /metrics against real vLLM's: same families, types, label names and buckets.

The reference is a /metrics page captured from vLLM 0.32.0 (CPU build) after a few requests,
committed as a fixture with its version; both pages are parsed with Prometheus' own parser.
Python-runtime and HTTP families (process_*, python_*, http_*) are the web server's, not the
engine's, and the `*_created` families are an artefact of how the client library exposes
counter creation times, so the comparison is over the `vllm:` families.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tokenpilot.core import vllm_metrics
from tokenpilot.core.sim import EngineConfig
from tokenpilot.tooling.engine_sim.server import ServedModel, running

FIXTURE = Path(__file__).parents[1] / "fixtures" / "vllm-metrics-0.32.0.txt"
# The fixture's server ran with --max-model-len 1024 (its header says so).
FIXTURE_MAX_MODEL_LEN = 1024


@dataclass(frozen=True)
class Family:
    type: str
    label_names: frozenset[str]
    bucket_edges: tuple[str, ...]


def families(text: str) -> dict[str, Family]:
    out = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:") or family.name.endswith("_created"):
            continue
        labels: set[str] = set()
        edges: list[str] = []
        for sample in family.samples:
            labels |= set(sample.labels) - {"le"}
            le = sample.labels.get("le")
            if sample.name.endswith("_bucket") and le is not None and le not in edges:
                edges.append(le)
        out[family.name] = Family(family.type, frozenset(labels), tuple(edges))
    return out


class Timer:
    def iteration_s(self, num_decode: int, num_prefill: int, num_kv_read: int) -> float:
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
    ours = families(await engine_sim_metrics())
    theirs = families(FIXTURE.read_text())
    assert sorted(ours) == sorted(theirs), (
        f"missing: {sorted(set(theirs) - set(ours))}; extra: {sorted(set(ours) - set(theirs))}"
    )
    for name, family in theirs.items():
        assert ours[name].type == family.type, name
        assert ours[name].label_names == family.label_names, name
        assert ours[name].bucket_edges == family.bucket_edges, name


def test_the_table_others_read_is_the_one_served() -> None:
    theirs = families(FIXTURE.read_text())
    assert {f.name for f in vllm_metrics.FAMILIES} == set(theirs)
    for family in vllm_metrics.FAMILIES:
        assert family.type.value == theirs[family.name].type, family.name
        edges = family.bucket_edges(FIXTURE_MAX_MODEL_LEN)
        expected = tuple(str(float(e)) for e in edges) + (("+Inf",) if edges else ())
        assert expected == theirs[family.name].bucket_edges, family.name
