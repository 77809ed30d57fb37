"""The scrape's HTTP client against real local servers that answer as servers do: by
Content-Length, in chunks, to the connection's end, compressed, kept alive or closed, with an
idle connection dropped by the server, and with answers that are not HTTP at all."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from tokenpilot.adapters.metrics.pages import MAX_PAGE_BYTES, PageClient, PageError

PAGE = 'vllm:num_requests_waiting{engine="0"} 3.0\n' * 200

Answer = Callable[[bytes], bytes]


def by_length(_: bytes) -> bytes:
    body = PAGE.encode()
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def in_chunks(_: bytes) -> bytes:
    body = PAGE.encode()
    chunks = b"".join(
        b"%x;ext=1\r\n%s\r\n" % (len(body[i : i + 1000]), body[i : i + 1000])
        for i in range(0, len(body), 1000)
    )
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + chunks + b"0\r\nX-T: 1\r\n\r\n"


def compressed(_: bytes) -> bytes:
    body = gzip.compress(PAGE.encode())
    return b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


@asynccontextmanager
async def server(
    answer: Answer, *, close_after: bool = False, to_the_end: bool = False
) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on 127.0.0.1; yields its URL and a list of the requests each connection
    carried (one entry per connection)."""
    carried: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        carried.append(0)
        index = len(carried) - 1
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                carried[index] += 1
                writer.write(answer(request))
                await writer.drain()
                if close_after or to_the_end:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    async with listening:
        yield f"http://127.0.0.1:{port}/metrics", carried


@pytest.mark.parametrize("answer", [by_length, in_chunks, compressed], ids=lambda a: a.__name__)
async def test_a_page_is_read_whole_and_its_connection_kept(answer: Answer) -> None:
    client = PageClient()
    async with server(answer) as (url, carried):
        pages = [await client.get(url, 2.0) for _ in range(3)]
    await client.aclose()
    assert all(page.status == 200 and page.text == PAGE for page in pages)
    assert carried == [3]  # one connection carried all three


async def test_a_page_to_the_connections_end_and_a_server_that_closes() -> None:
    def http10(_: bytes) -> bytes:
        return b"HTTP/1.0 200 OK\r\n\r\n" + PAGE.encode()

    client = PageClient()
    async with server(http10, to_the_end=True) as (url, carried):
        pages = [await client.get(url, 2.0) for _ in range(2)]
    await client.aclose()
    assert [page.text for page in pages] == [PAGE, PAGE]
    assert carried == [1, 1]


@pytest.mark.parametrize("pause_s", [0.0, 0.05], ids=["at-once", "after-the-close-is-seen"])
async def test_an_idle_connection_the_server_dropped_is_retried_on_a_new_one(
    pause_s: float,
) -> None:
    client = PageClient()
    async with server(by_length, close_after=True) as (url, carried):
        first = await client.get(url, 2.0)
        # The server closed it after its answer, saying nothing: the client finds out when
        # it sees the close, or when its next request on that connection fails.
        await asyncio.sleep(pause_s)
        second = await client.get(url, 2.0)
    await client.aclose()
    assert first.text == second.text == PAGE
    assert carried == [1, 1]


async def test_an_error_status_is_a_page_with_its_status() -> None:
    def error(_: bytes) -> bytes:
        return b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\ndead"

    client = PageClient()
    async with server(error) as (url, _):
        page = await client.get(url, 2.0)
    await client.aclose()
    assert (page.status, page.text) == (500, "dead")


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (lambda _: b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not an HTTP/1.x response"),
        (lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "bad Content-Length"),
        (
            lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_PAGE_BYTES + 1),
            "page over 16 MiB",
        ),
        (
            lambda _: b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx",
            "Content-Encoding 'br'",
        ),
        (
            lambda _: b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
            "does not inflate",
        ),
    ],
)
async def test_an_answer_that_is_not_a_page_is_refused_in_words(answer: Answer, words: str) -> None:
    client = PageClient()
    async with server(answer) as (url, _):
        with pytest.raises(PageError, match=words):
            await client.get(url, 2.0)
    await client.aclose()


async def test_a_silent_server_times_out_and_an_absent_one_refuses() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)
        writer.close()

    client = PageClient()
    listening = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    async with listening:
        with pytest.raises(TimeoutError):
            await client.get(f"http://127.0.0.1:{port}/metrics", 0.2)
    with pytest.raises(OSError):
        await client.get(f"http://127.0.0.1:{port}/metrics", 2.0)
    with pytest.raises(PageError, match="only http://"):
        await client.get("https://127.0.0.1/metrics", 2.0)
    await client.aclose()
