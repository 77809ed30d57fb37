"""A stand-in for the llm-d routing sidecar, for the dev cluster's decode pods.

It takes the sidecar's place in front of a decode engine, with its flags (`--port`,
`--vllm-port` or `--model-server-port`, `--secure-proxy`), and does its part of a hand-off: a
completion or chat request that names a prefill engine in `x-prefiller-host-port` (as the
llm-d router's endpoint picker names the prefill pod it chose) is first sent to that engine
for one token with `kv_transfer_params` `{"do_remote_decode": true}`; the request then goes to
its own engine with the `kv_transfer_params` the prefill engine answered. Every other request
(no header, other paths: /metrics, /health, /v1/models) goes to its own engine as it came. The
engine's answer, streamed or whole, comes back as the engine sent it. Plain HTTP only:
`--secure-proxy` must be false.

    python -m tokenpilot_lab.routing_sidecar --port=8000 --vllm-port=8200 \
        --secure-proxy=false --host 10.0.0.7
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Sequence

import aiohttp
from aiohttp import web

from tokenpilot_lab.engine_sim.handoff import PREFILLER_HEADER, HandoffError, prefill_remotely

log = logging.getLogger("tokenpilot.routing-sidecar")

HANDED_OFF_PATHS = ("/v1/completions", "/v1/chat/completions")
TIMEOUT_S = 300.0
# Hop-by-hop headers, which a proxy does not pass on.
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class RoutingSidecar:
    """The proxy in front of one engine at `engine_url`."""

    def __init__(self, engine_url: str) -> None:
        self.engine_url = engine_url
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.forward)
        self.app.on_cleanup.append(self._close)
        self._session: aiohttp.ClientSession | None = None

    async def _close(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
        return self._session

    async def forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        prefiller = request.headers.get(PREFILLER_HEADER)
        if prefiller and request.method == "POST" and request.path in HANDED_OFF_PATHS:
            try:
                asked = json.loads(body)
                params = await prefill_remotely(prefiller, request.path, asked, TIMEOUT_S)
            except HandoffError as error:
                return _error(error.status, str(error))
            except (json.JSONDecodeError, TypeError) as error:
                return _error(400, f"the request body is not JSON: {error}")
            body = json.dumps({**asked, "kv_transfer_params": params}).encode()
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in _HOP and k.lower() != PREFILLER_HEADER
        }
        url = f"{self.engine_url}{request.path_qs}"
        try:
            async with self.session().request(
                request.method, url, data=body, headers=headers
            ) as upstream:
                response = web.StreamResponse(
                    status=upstream.status,
                    headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP},
                )
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (aiohttp.ClientError, TimeoutError) as error:
            return _error(502, f"the engine at {self.engine_url} did not answer: {error}")


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "RoutingSidecarError", "code": status}},
        status=status,
    )


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="routing-sidecar", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--host", default="127.0.0.1", help="the address to serve and reach the engine on"
    )
    parser.add_argument("--port", type=int, default=8000, help="the port to serve on")
    parser.add_argument(
        "--vllm-port", "--model-server-port", dest="vllm_port", type=int, default=8200,
        help="the engine's port, on --host",
    )  # fmt: skip
    parser.add_argument("--secure-proxy", default="true", help="must be false: plain HTTP only")
    args, unknown = parser.parse_known_args(list(argv))
    if args.secure_proxy.lower() != "false":
        parser.error(
            "--secure-proxy: the stand-in serves plain HTTP only; pass --secure-proxy=false"
        )
    if unknown:
        log.warning("ignoring flags the stand-in does not model: %s", " ".join(unknown))
    return args


async def _serve(args: argparse.Namespace) -> None:
    sidecar = RoutingSidecar(f"http://{args.host}:{args.vllm_port}")
    runner = web.AppRunner(sidecar.app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.host, args.port).start()
    log.info("routing sidecar on %s:%d, engine on port %d", args.host, args.port, args.vllm_port)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parse(sys.argv[1:] if argv is None else argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
