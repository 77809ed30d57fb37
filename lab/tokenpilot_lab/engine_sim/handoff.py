"""An engine simulator's part in disaggregated serving, as vLLM with a KV connector and the llm-d
router's routing sidecar show it on the wire.

- A prefill engine (`kv_role` kv_producer or kv_both) asked with `kv_transfer_params`
  `{"do_remote_decode": true}` serves the request (the sidecar asks for one token, unstreamed)
  and answers with the `kv_transfer_params` a decode engine pulls the prompt's KV with:
  `do_remote_prefill`, its engine id, the request's id and KV blocks, and where to reach it.
- A decode engine (kv_consumer or kv_both) asked with `{"do_remote_prefill": true, ...}` pulls
  the KV: it waits the transfer, the model's KV bytes per token times the prompt over the link
  at its line rate (core.disaggregation.kv_transfer_s), in engine time, and then runs the
  request with its prompt computed but for the last token, which it computes for the logits.
  Its TTFT histogram counts from the end of the transfer; the tokens it received are counted as
  vLLM counts a connector's: external prefix-cache queries and hits.
`prefill_remotely` is the routing sidecar's first half (tokenpilot_lab.routing_sidecar): it
asks the prefill engine the endpoint picker chose for one token with `do_remote_decode`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from tokenpilot.api.model_shape import ModelShape
from tokenpilot.core.disaggregation import KvLink, kv_transfer_s

# The header the llm-d router's endpoint picker names the chosen prefill pod in (host:port).
PREFILLER_HEADER = "x-prefiller-host-port"
PRODUCERS = ("kv_producer", "kv_both")
CONSUMERS = ("kv_consumer", "kv_both")


class HandoffError(Exception):
    """A hand-off this engine cannot take part in; `status` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# vLLM's NIXL side channel, where a decode engine reaches the prefill engine for the KV
# (vllm/envs.py: VLLM_NIXL_SIDE_CHANNEL_HOST, VLLM_NIXL_SIDE_CHANNEL_PORT and their defaults).
SIDE_CHANNEL_HOST = "localhost"
SIDE_CHANNEL_PORT = 5600


@dataclass(frozen=True)
class Handoff:
    """This engine's role (`kv_role`), its engine id, the price of pulling a prompt's KV, and
    the side channel it names in what it answers."""

    kv_role: str
    engine_id: str
    shape: ModelShape
    link: KvLink
    host: str = SIDE_CHANNEL_HOST
    port: int = SIDE_CHANNEL_PORT

    def produces(self) -> bool:
        return self.kv_role in PRODUCERS

    def consumes(self) -> bool:
        return self.kv_role in CONSUMERS

    def transfer_s(self, num_tokens: int) -> float:
        return kv_transfer_s(self.shape, num_tokens, self.link)

    def produced(self, request_id: str, num_prompt_tokens: int, block_size: int) -> dict[str, Any]:
        """The `kv_transfer_params` a prefill engine answers with."""
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_engine_id": self.engine_id,
            "remote_request_id": request_id,
            "remote_block_ids": list(range(math.ceil(num_prompt_tokens / block_size))),
            "remote_host": self.host,
            "remote_port": self.port,
            "remote_num_tokens": num_prompt_tokens,
            "tp_size": 1,
        }


def wanted(params: object) -> tuple[bool, bool]:
    """(asked to produce, asked to consume) by a request's `kv_transfer_params`."""
    if not isinstance(params, Mapping):
        return False, False
    return bool(params.get("do_remote_decode")), bool(params.get("do_remote_prefill"))


async def prefill_remotely(
    host_port: str, path: str, body: Mapping[str, Any], timeout_s: float
) -> dict[str, Any]:
    """The routing sidecar's first half: ask the prefill engine at `host_port` for one token of
    `body` with `do_remote_decode`; its `kv_transfer_params`."""
    asked = {
        **body,
        "max_tokens": 1,
        "stream": False,
        "kv_transfer_params": {"do_remote_decode": True},
    }
    asked.pop("stream_options", None)
    if "max_completion_tokens" in asked:
        asked["max_completion_tokens"] = 1
    url = f"http://{host_port}{path}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.post(url, json=asked) as response,
        ):
            answer = await response.json(content_type=None)
            if response.status != 200:
                raise HandoffError(response.status, f"the prefill engine at {host_port}: {answer}")
    except (aiohttp.ClientError, TimeoutError) as error:
        raise HandoffError(
            502, f"the prefill engine at {host_port} did not answer: {error}"
        ) from None
    params = answer.get("kv_transfer_params") if isinstance(answer, Mapping) else None
    if not isinstance(params, dict) or not params.get("do_remote_prefill"):
        raise HandoffError(
            502, f"the prefill engine at {host_port} gave no kv_transfer_params to pull from"
        )
    return params
