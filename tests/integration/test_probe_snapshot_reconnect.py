"""A /metrics snapshot survives the engine closing a pooled connection as it is reused.

The server here answers one request per connection and then resets it when the next request
arrives, which is what a client sees when uvicorn's idle timeout closes a connection at the
instant the client sends on it (seen as `httpx.ReadError` on a busy machine). A GET is safe to
send again; a second loss is the engine's failure, named as such.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

import httpx
import pytest

from tokenpilot.adapters.interference import SNAPSHOT_TIME, _snapshot
from tokenpilot.core.interference import ProbeError, ProbeSettings

BODY = b"vllm:num_requests_running 3.0\n"


async def _read_request(reader: asyncio.StreamReader) -> bool:
    try:
        await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    return True


def _reset(writer: asyncio.StreamWriter) -> None:
    # SO_LINGER 0: close with a reset, not a FIN, as a server does under a racing close.
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _serve_once_per_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer_every: bool
) -> None:
    answered = 0
    while await _read_request(reader):
        if answered and not answer_every:
            _reset(writer)
            return
        head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(BODY)}\r\n\r\n".encode()
        writer.write(head + BODY)
        await writer.drain()
        answered += 1
    writer.close()


@pytest.fixture
async def flaky_engine() -> AsyncIterator[str]:
    server = await asyncio.start_server(
        lambda r, w: _serve_once_per_connection(r, w, answer_every=False), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
async def resetting_engine() -> AsyncIterator[str]:
    async def reset_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await _read_request(reader):
            _reset(writer)

    server = await asyncio.start_server(reset_all, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


def _settings() -> ProbeSettings:
    return ProbeSettings(url="unused", snapshot_metrics=True)


async def test_a_snapshot_on_a_connection_reset_as_it_is_reused_is_taken_again(
    flaky_engine: str,
) -> None:
    snapshots: dict[str, str] = {}
    async with httpx.AsyncClient() as client:
        await _snapshot(client, flaky_engine, _settings(), snapshots, "before")
        # The pooled connection is reset when this request arrives on it.
        await _snapshot(client, flaky_engine, _settings(), snapshots, "after")
    assert set(snapshots) == {"before", "after"}
    assert snapshots["after"].startswith(SNAPSHOT_TIME)
    assert snapshots["after"].endswith(BODY.decode())


async def test_an_engine_that_resets_every_snapshot_fails_the_protocol_by_name(
    resetting_engine: str,
) -> None:
    snapshots: dict[str, str] = {}
    async with httpx.AsyncClient() as client:
        with pytest.raises(ProbeError, match=r"lost the connection to .*/metrics twice after"):
            await _snapshot(client, resetting_engine, _settings(), snapshots, "after")
    assert snapshots == {}
