"""The interference probe against real vLLM (CPU build, tiny model): the protocol runs end to
end on an endpoint that does not stamp engine time, reading iteration times from arrival
times. The tiny model on a CPU says nothing about GPU interference; the figures only have to
be measurements (positive, finite, a baseline near the engine's own inter-token latency).

The probe runs on the tier's long-context server, with the tiny model's whole context (16,384
positions), not the session's 1,024 (kept for the /metrics fixture, whose buckets follow it).
Every decode stream must outlive the probe, and the probe's windows are wall-clock time while
the streams run at the engine's pace: at 960 tokens a stream ended in 1.3 s, and on a busy
machine the client fell that far behind in 4 of 7 runs ("a decode stream ended before the burst was
sent"); at 4,032 tokens (about 5 s) it still happened twice with two CPU burners running
beside the suite. At 16,320 tokens a stream lasts about 20 s on an idle machine.
"""

from __future__ import annotations

import math

import pytest

from tokenpilot.adapters.interference import run_probe
from tokenpilot.core.interference import ProbeSettings
from tokenpilot_lab.vllm_server import VllmServer

pytestmark = pytest.mark.engine


async def test_the_probe_runs_against_real_vllm(long_context_server: VllmServer) -> None:
    config = long_context_server.config
    settings = ProbeSettings(
        url=long_context_server.base_url,
        num_decode=4,
        num_prefill=2,
        prefill_len=256,
        # About 1 s of windows, a twentieth of a stream's life on an idle machine; 0.5 s of baseline
        # is still hundreds of iterations at the tiny model's 1-5 ms steps.
        settle_s=0.2,
        baseline_s=0.5,
        recovery_s=0.3,
        decode_prompt_len=32,
        decode_max_tokens=config.max_model_len - 64,
    )
    result = await run_probe(settings)
    print(result.describe())
    assert 0 < result.baseline_ms < 1000
    assert math.isfinite(result.interference_pct)
    assert result.num_mixed_iterations >= 1
