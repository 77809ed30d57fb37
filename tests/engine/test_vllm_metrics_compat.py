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
