"""engine-sim in disaggregated serving: a prefill engine and a decode engine on loopback, and in
front of the decode engine the routing sidecar's stand-in (tokenpilot_lab.routing_sidecar),
which takes a request naming a prefill engine in `x-prefiller-host-port` (as the llm-d
router's endpoint picker names it) through the hand-off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from tokenpilot.api.model_shape import model_preset
from tokenpilot.core.disaggregation import KvLink, kv_transfer_s
from tokenpilot.core.roofline import PrefillChunk
from tokenpilot_lab.engine_sim import options
from tokenpilot_lab.engine_sim.handoff import PREFILLER_HEADER, Handoff
from tokenpilot_lab.engine_sim.server import ServedModel, running
from tokenpilot_lab.routing_sidecar import RoutingSidecar, parse
from tokenpilot_lab.sim import EngineConfig

MODEL = "sim-model"
MAX_MODEL_LEN = 8192
SHAPE = model_preset("llama-3.1-8b")
# A slow link, so the transfer is a visible share of the TTFT.
LINK = KvLink(1.0, "test")
PROMPT = list(range(2, 2002))  # 2,000 tokens
TIME_SCALE = 20.0


@dataclass(frozen=True)
class PrefillPriced:
    """10 ms a step plus 0.1 ms a prefill token (engine time)."""

    def iteration_s(
        self, num_decodes: int, decode_context_tokens: int, prefill_chunks: object = ()
    ) -> float:
        chunks: list[PrefillChunk] = list(prefill_chunks)  # type: ignore[call-overload]
        return 0.010 + 0.0001 * sum(c.num_new_tokens for c in chunks)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[str, str]]:
    """(the prefill engine's URL, the decode pod's URL: its routing sidecar's)."""
    served = ServedModel((MODEL,), MODEL, MAX_MODEL_LEN)

    def config(caching: bool) -> EngineConfig:
        return EngineConfig(
            num_kv_blocks=4096, max_model_len=MAX_MODEL_LEN, enable_prefix_caching=caching
        )

    def role(kv_role: str) -> Handoff:
        return Handoff(kv_role=kv_role, engine_id=f"sim-{kv_role}", shape=SHAPE, link=LINK)

    async with (
        running(config(True), PrefillPriced(), served, TIME_SCALE, handoff=role("kv_producer"))
        as (_, prefill_url),
        running(config(True), PrefillPriced(), served, TIME_SCALE, handoff=role("kv_consumer"))
        as (_, engine_url),
    ):  # fmt: skip
        runner = web.AppRunner(RoutingSidecar(engine_url).app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            yield prefill_url, f"http://127.0.0.1:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()


async def counter(client: httpx.AsyncClient, url: str, name: str) -> float:
    text = (await client.get(f"{url}/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not on {url}/metrics")


async def test_a_request_goes_through_a_prefill_and_a_decode_engine(pair: tuple[str, str]) -> None:
    prefill_url, decode_url = pair
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 20}
    async with httpx.AsyncClient(timeout=60.0) as client:
        answer = await client.post(
            f"{decode_url}/v1/completions",
            json=body,
            headers={PREFILLER_HEADER: prefill_url.removeprefix("http://")},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"] == {
            "prompt_tokens": 2000,
            "completion_tokens": 20,
            "total_tokens": 2020,
        }
        # The prefill engine computed the prompt and sampled one token; the decode engine
        # received all but its last token's KV and sampled the 20 the client got.
        assert await counter(client, prefill_url, "vllm:generation_tokens_total") == 1
        assert await counter(client, prefill_url, "vllm:prompt_tokens_total") == 2000
        assert await counter(client, decode_url, "vllm:generation_tokens_total") == 20
        assert await counter(client, decode_url, "vllm:external_prefix_cache_hits_total") == 1999
        assert await counter(client, decode_url, "vllm:prefix_cache_hits_total") == 0
        # The decode engine's first step computed one token, not the prompt: its prefill time
        # is a 1-token step's (10.1 ms), not 2,000 tokens' (210 ms), in engine seconds.
        prefill_sum = await counter(client, decode_url, "vllm:request_prefill_time_seconds_sum")
        assert prefill_sum < 0.05


async def test_a_prefill_answers_where_to_pull_the_kv_from(pair: tuple[str, str]) -> None:
    prefill_url, _ = pair
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "max_tokens": 1,
        "kv_transfer_params": {"do_remote_decode": True},
    }
    async with httpx.AsyncClient(timeout=60.0) as client:
        answer = (await client.post(f"{prefill_url}/v1/completions", json=body)).json()
    params = answer["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["remote_engine_id"] == "sim-kv_producer"
    assert len(params["remote_block_ids"]) == 2000 // 16
    assert params["remote_num_tokens"] == 2000


@pytest.mark.parametrize(
    ("which", "body_extra", "headers", "message"),
    [
        ("decode", {"kv_transfer_params": {"do_remote_decode": True}}, {}, "kv_consumer engine"),
        ("prefill", {"kv_transfer_params": {"do_remote_prefill": True}}, {}, "kv_producer engine"),
        ("decode", {}, {PREFILLER_HEADER: "127.0.0.1:1"}, "did not answer"),
    ],
)
async def test_a_hand_off_an_engine_cannot_take_is_refused_naming_why(
    pair: tuple[str, str], which: str, body_extra: dict, headers: dict, message: str
) -> None:
    url = dict(zip(("prefill", "decode"), pair, strict=True))[which]
    body = {"model": MODEL, "prompt": PROMPT[:50], "max_tokens": 2, **body_extra}
    async with httpx.AsyncClient(timeout=60.0) as client:
        answer = await client.post(f"{url}/v1/completions", json=body, headers=headers)
    assert answer.status_code in (400, 502)
    assert message in answer.json()["error"]["message"]


def test_the_transfer_is_priced_at_the_links_line_rate() -> None:
    # 1,999 tokens of 128 KiB at 1 Gb/s: about 2.1 s of engine time.
    assert kv_transfer_s(SHAPE, 1999, LINK) == pytest.approx(1999 * 131_072 * 8 / 1e9)


@pytest.mark.parametrize(
    ("config", "caching", "message"),
    [
        ("not json", False, "is not JSON"),
        ('{"kv_role":"kv_producer"}', False, "needs an object with kv_connector"),
        ('{"kv_connector":"NixlConnector","kv_role":"kv_sender"}', False, "kv_role must be"),
    ],
)
def test_a_kv_transfer_config_it_cannot_run_is_refused_naming_the_fix(
    config: str, caching: bool, message: str
) -> None:
    argv = ["--kv-transfer-config", config]
    argv += [] if caching else ["--no-enable-prefix-caching"]
    with pytest.raises(options.OptionsError, match=message.replace("-", r"\-")):
        options.parse(argv)


def test_the_stand_in_serves_plain_http_only_as_told() -> None:
    args = parse(["--port=8000", "--vllm-port=8200", "--secure-proxy=false", "--host", "10.0.0.7"])
    assert (args.port, args.vllm_port, args.host) == (8000, 8200, "10.0.0.7")
    assert parse(["--model-server-port", "8300", "--secure-proxy=false"]).vllm_port == 8300
    with pytest.raises(SystemExit):
        parse(["--port=8000"])  # --secure-proxy defaults to true, as the real sidecar's does
