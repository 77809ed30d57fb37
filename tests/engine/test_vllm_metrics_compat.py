"""The committed /metrics fixture is what this vLLM really exposes.

Families, types, label names and bucket edges of the live server's `vllm:` families must equal
those of tests/fixtures/vllm-metrics-<version>.txt for the running version, so tests that only
have the fixture (the engine simulator's compatibility test) check against real vLLM.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tokenpilot_lab.metrics_schema import metrics_schema, schema_differences
from tokenpilot_lab.vllm_fixtures import serve_sample_requests
from tokenpilot_lab.vllm_server import VllmServer

pytestmark = pytest.mark.engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_live_metrics_match_the_committed_fixture(vllm_server: VllmServer) -> None:
    version = httpx.get(f"{vllm_server.base_url}/version", timeout=30.0).json()["version"]
    fixture = FIXTURES / f"vllm-metrics-{version}.txt"
    assert fixture.exists(), (
        f"no /metrics fixture for vLLM {version}; capture one with "
        "`python -m tokenpilot_lab.vllm_fixtures` and commit it"
    )
    # The fixture was captured after these requests; some families only appear once used.
    serve_sample_requests(vllm_server.base_url, vllm_server.config.served_model_name)
    live_page = httpx.get(f"{vllm_server.base_url}/metrics", timeout=30.0).text

    expected = metrics_schema(fixture.read_text())
    live = metrics_schema(live_page)

    differences = schema_differences(expected, live)
    assert not differences, f"{fixture.name} differs from live vLLM {version}:\n" + "\n".join(
        differences
    )
    # Guard against comparing two empty pages.
    assert expected["vllm:time_to_first_token_seconds"].type == "histogram"


def test_the_autoscalers_scrape_reads_real_vllm_as_an_http_client_does(
    vllm_server: VllmServer,
) -> None:
    """The direct source's own HTTP client and parser, against vLLM's server, give the sample
    that httpx's page gives: three scrapes over one kept-alive connection."""
    import asyncio

    from tokenpilot.adapters.metrics import DirectSource, PodEndpoint, ServiceTarget
    from tokenpilot.adapters.metrics.parse import ENGINE_FAMILIES, engine_sample, parse_metrics

    serve_sample_requests(vllm_server.base_url, vllm_server.config.served_model_name)
    url = f"{vllm_server.base_url}/metrics"
    target = ServiceTarget("ns", "llm", 1, 1, (PodEndpoint("vllm-0", url),))

    async def scrapes() -> list[object]:
        source = DirectSource()
        try:
            return [await source.read(target, float(i)) for i in range(3)]
        finally:
            await source.aclose()

    read = asyncio.run(scrapes())
    expected = engine_sample(parse_metrics(httpx.get(url, timeout=30.0).text, ENGINE_FAMILIES), 2.0)
    for scrape in read:
        assert scrape.problems == () and set(scrape.samples) == {"vllm-0"}  # type: ignore[attr-defined]
    last = read[-1].samples["vllm-0"]  # type: ignore[attr-defined]
    assert last.requests_total == expected.requests_total and last.requests_total > 0
    assert last.prompt_len_buckets == expected.prompt_len_buckets
