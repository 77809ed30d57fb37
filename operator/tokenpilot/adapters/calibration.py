"""Take a calibration grid's measurements from an engine, through the interference protocol.

Each grid point is one probe condition (`tokenpilot.adapters.interference`): prime the decodes,
take the baseline, send the burst, watch the recovery, close every stream. What the engine is
(version, context limit, KV cache) comes from its /version, /v1/models and /metrics.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from tokenpilot.adapters.interference import ProbeError, ProbeSettings, run_probe
from tokenpilot.core.calibration.derive import PointResult
from tokenpilot.core.calibration.grid import DECODE_HEADROOM_TOKENS, GridPoint

_KV_TOKENS = re.compile(r'vllm:cache_config_info\{[^}]*kv_cache_size_tokens="(\d+)"')
_KV_BLOCKS = re.compile(r'vllm:cache_config_info\{[^}]*num_gpu_blocks="(\d+)"')
_BLOCK_SIZE = re.compile(r'vllm:cache_config_info\{[^}]*[{,]block_size="(\d+)"')


@dataclass(frozen=True, slots=True)
class EngineInfo:
    model: str
    engine: str
    max_model_len: int
    kv_capacity_tokens: int | None


@dataclass(frozen=True, slots=True)
class Windows:
    """The protocol's waits, in engine seconds (divided by `time_scale` on the wall clock)."""

    settle_s: float = 0.5
    baseline_s: float = 0.5
    recovery_s: float = 0.5
    time_scale: float = 1.0
    request_timeout_s: float = 120.0


async def engine_info(url: str, model: str, timeout_s: float = 30.0) -> EngineInfo:
    """What the endpoint says about itself; ProbeError names what it could not read."""
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        try:
            models = (await client.get(f"{url}/v1/models")).raise_for_status().json()
        except (httpx.HTTPError, ValueError) as error:
            raise ProbeError(
                f"cannot list models at {url}/v1/models ({error}); is --endpoint an "
                f"OpenAI-compatible engine?"
            ) from None
        cards = {card.get("id"): card for card in models.get("data", [])}
        if model not in cards:
            raise ProbeError(
                f"--model {model!r} is not served at {url}; it serves: "
                f"{', '.join(str(name) for name in cards) or 'nothing'}"
            )
        max_model_len = int(cards[model].get("max_model_len") or 0)
        if max_model_len <= 0:
            raise ProbeError(f"{url}/v1/models gives no max_model_len for {model!r}")
        version = "unknown"
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
            version = str((await client.get(f"{url}/version")).json()["version"])
        kv_tokens = None
        with contextlib.suppress(httpx.HTTPError):
            kv_tokens = kv_capacity_tokens((await client.get(f"{url}/metrics")).text)
    return EngineInfo(model, f"vLLM {version}", max_model_len, kv_tokens)


def kv_capacity_tokens(metrics_text: str) -> int | None:
    """Tokens the KV cache holds, from vllm:cache_config_info (None if it is not there)."""
    if match := _KV_TOKENS.search(metrics_text):
        return int(match.group(1))
    blocks, size = _KV_BLOCKS.search(metrics_text), _BLOCK_SIZE.search(metrics_text)
    if blocks and size:
        return int(blocks.group(1)) * int(size.group(1))
    return None


async def measure_grid(
    url: str,
    info: EngineInfo,
    points: Sequence[GridPoint],
    windows: Windows,
    on_point: Callable[[GridPoint, PointResult], None],
) -> list[PointResult]:
    """Every point in turn; each leaves no stream open on the engine, also when interrupted
    (the probe closes its streams in a `finally`, and closing one aborts it on the server)."""
    results = []
    for point in points:
        settings = ProbeSettings(
            url=url,
            num_decode=point.num_decode,
            num_prefill=point.num_prefill,
            prefill_len=point.prefill_len,
            settle_s=windows.settle_s,
            baseline_s=windows.baseline_s,
            recovery_s=windows.recovery_s,
            time_scale=windows.time_scale,
            model=info.model,
            decode_prompt_len=point.context_tokens,
            decode_max_tokens=max(
                info.max_model_len - point.context_tokens - 8, DECODE_HEADROOM_TOKENS
            ),
            request_timeout_s=windows.request_timeout_s,
        )
        probe = await run_probe(settings)
        result = PointResult(
            point=point,
            baseline_s=probe.baseline_ms / 1e3,
            mixed_s=probe.mixed_ms / 1e3,
            num_mixed_steps=probe.num_mixed_iterations,
            decode_context_tokens=probe.decode_context_tokens,
        )
        on_point(point, result)
        results.append(result)
    return results
