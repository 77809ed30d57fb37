"""The interference probe against real vLLM (CPU build, tiny model): the protocol runs end to
end on an endpoint that does not stamp engine time, reading iteration times from arrival
times. The tiny model on a CPU says nothing about GPU interference; the figures only have to
be measurements (positive, finite, a baseline near the engine's own inter-token latency)."""

from __future__ import annotations

import math

import pytest

from tokenpilot.tooling.probe import ProbeSettings, run_probe
from tokenpilot.tooling.vllm_server import VllmServer

pytestmark = pytest.mark.engine


async def test_the_probe_runs_against_real_vllm(vllm_server: VllmServer) -> None:
    config = vllm_server.config
    settings = ProbeSettings(
        url=vllm_server.base_url,
        num_decode=4,
        num_prefill=2,
        prefill_len=256,
        # Short windows: the tiny model can decode 960 tokens (its 1,024-token context) in under
        # 2 s on an idle machine, and every decode stream must outlive the whole probe. 0.2 s is
        # still 20 to 200 iterations at its 1-10 ms steps.
        settle_s=0.1,
        baseline_s=0.25,
        recovery_s=0.2,
        decode_prompt_len=32,
        decode_max_tokens=config.max_model_len - 64,
    )
    result = await run_probe(settings)
    print(result.describe())
    assert 0 < result.baseline_ms < 1000
    assert math.isfinite(result.interference_pct)
    assert result.num_mixed_iterations >= 1
