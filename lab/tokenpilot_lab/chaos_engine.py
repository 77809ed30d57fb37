"""Engines that misbehave on purpose, for the chaos tests (tests/chaos).

    hang-metrics  /health answers 200, /metrics accepts the connection and never answers
    never-ready   /health answers 503 forever: the pod runs and never turns Ready

The pod runner maps the images `tokenpilot.dev/hang-metrics:*` and `tokenpilot.dev/never-ready:*`
to this module (podrunner/data/images.yaml); the engine's own arguments are ignored.
"""

from __future__ import annotations

import argparse
import asyncio

HANG_S = 24 * 3600.0


async def _serve(mode: str, host: str, port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readline()
            while (await reader.readline()).strip():
                pass  # the headers
            path = request.split(b" ")[1] if request.count(b" ") >= 2 else b"/"
            if path.startswith(b"/health"):
                status = b"200 OK" if mode == "hang-metrics" else b"503 Service Unavailable"
            elif path.startswith(b"/metrics") and mode == "hang-metrics":
                await asyncio.sleep(HANG_S)  # connection accepted, never answered
                return
            else:
                status = b"404 Not Found"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tokenpilot_lab.chaos_engine")
    parser.add_argument("--mode", choices=("hang-metrics", "never-ready"), required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args, _engine_args = parser.parse_known_args(argv)
    asyncio.run(_serve(args.mode, args.host, args.port))


if __name__ == "__main__":
    main()
