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

from tokenpilot.adapters.interference import SNAPSHOT_TIME, run_probe
from tokenpilot.core.calibration.derive import PointResult
from tokenpilot.core.calibration.grid import DECODE_HEADROOM_TOKENS, GridPoint
from tokenpilot.core.interference import ProbeError, ProbeSettings, UnmeasurableError

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
            snapshot_metrics=True,
        )
        try:
            probe = await run_probe(settings)
        except UnmeasurableError as error:
            raise UnmeasurableError(f"{point.label()} could not be timed: {error}") from None
        baseline_s, mixed_s = probe.baseline_ms / 1e3, probe.mixed_ms / 1e3
        if not probe.engine_stamped:
            baseline_s, mixed_s = engine_timings(
                probe.metrics, point.num_decode, point.num_prefill
            ) or (
                baseline_s,
                mixed_s,
            )
        result = PointResult(
            point=point,
            baseline_s=baseline_s,
            mixed_s=mixed_s,
            num_mixed_steps=probe.num_mixed_iterations,
            decode_context_tokens=probe.decode_context_tokens,
        )
        on_point(point, result)
        results.append(result)
    return results


# Tokens the engine generated: each decode step gives every running decode one.
TOKENS_COUNTER = "vllm:generation_tokens_total"
PREFILL_HISTOGRAM = "vllm:request_prefill_time_seconds"


def histogram_totals(metrics_text: str, name: str) -> tuple[float, float]:
    """(sum, count) of a histogram over all its series."""
    total, count = 0.0, 0.0
    for line in metrics_text.splitlines():
        for suffix in ("_sum", "_count"):
            if line.startswith(name + suffix) and line[len(name) + len(suffix)] in "{ ":
                value = float(line.rsplit(" ", 1)[1])
                if suffix == "_sum":
                    total += value
                else:
                    count += value
    return total, count


def counter_total(metrics_text: str, name: str) -> float:
    """A counter's value summed over its series."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics_text.splitlines()
        if line.startswith(name) and line[len(name)] in "{ "
    )


def engine_timings(
    snapshots: dict[str, str], num_decode: int, num_prefill: int
) -> tuple[float, float] | None:
    """(decode step, burst step) in the engine's own time, from its /metrics, for an engine
    whose chunks carry no time stamps (real vLLM): arrival times at a client on a busy machine
    bunch tokens together, the engine's histograms do not.

    The decode step is the baseline's wall time over the steps the engine ran in it, counted
    as the tokens it generated over the decodes (each decode step gives every decode one):
    every step then is a decode step and the engine never idles. vLLM's
    inter-token latency is not used: its front end stamps it, and a busy front end that takes
    several steps' tokens at once stretches it. The burst step is the mean prefill time of the
    burst's requests, vLLM's time from a request's first scheduling to its first token: each
    prompt of the grid's bursts is scheduled in one step and finished by it (one prompt filling
    the room, or four each filling one step), so that is the mean of the steps that carried it.
    None when a snapshot is missing or the counts are not the burst's."""
    if not {"baseline", "burst", "after"} <= snapshots.keys():
        return None
    tokens0 = counter_total(snapshots["baseline"], TOKENS_COUNTER)
    tokens1 = counter_total(snapshots["burst"], TOKENS_COUNTER)
    pre_sum0, pre_count0 = histogram_totals(snapshots["burst"], PREFILL_HISTOGRAM)
    pre_sum1, pre_count1 = histogram_totals(snapshots["after"], PREFILL_HISTOGRAM)
    if tokens1 <= tokens0 or round(pre_count1 - pre_count0) != num_prefill:
        return None
    elapsed_s = _taken(snapshots["burst"]) - _taken(snapshots["baseline"])
    steps = (tokens1 - tokens0) / num_decode
    return (elapsed_s / steps, (pre_sum1 - pre_sum0) / (pre_count1 - pre_count0))


def _taken(snapshot: str) -> float:
    first = snapshot.split("\n", 1)[0]
    if not first.startswith(SNAPSHOT_TIME):
        raise ValueError("a /metrics snapshot without its time")
    return float(first.removeprefix(SNAPSHOT_TIME))
