"""GET an engine's /metrics page over HTTP/1.1, one kept-alive connection per engine.

The direct source fetches every engine's page every interval, and a general-purpose client's
machinery (connection-pool bookkeeping, middleware, its async backend's layers) cost the
operator more CPU per page than parsing it (docs/benchmarks/soak.md). A scrape needs a small,
fixed part of HTTP: one GET of a plain-text page, read by Content-Length, chunks or the
connection's end, with no redirects, cookies, proxies or TLS (engine pods are addressed by IP
inside the cluster, in plain HTTP, as the rendered Deployment serves them).

A connection is reused while the engine keeps it open and dropped after `idle_s` unused; a
reused connection the engine closed meanwhile is retried once on a new one, since a server
may close an idle connection at any moment. Every fetch has one time limit for connecting,
asking and reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# The largest page read; a vLLM page is ~50 KB, a few hundred KB with many LoRA adapters.
MAX_PAGE_BYTES = 16 * 1024 * 1024
# Longer than an evaluation interval, so every round reuses the connection it opened.
IDLE_S = 60.0
# The longest a status line and headers may be.
MAX_HEAD_BYTES = 64 * 1024


class PageError(Exception):
    """The engine could not be asked, or answered something that is not an HTTP response."""


@dataclass(frozen=True, slots=True)
class Page:
    status: int
    text: str


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since_s: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        self.writer.close()


@dataclass
class PageClient:
    """Fetches pages by URL; see the module docstring. Not safe across event loops."""

    idle_s: float = IDLE_S
    _idle: dict[tuple[str, int], list[_Connection]] = field(default_factory=dict)
    _swept_s: float = field(default_factory=time.monotonic)

    async def get(self, url: str, timeout_s: float) -> Page:
        """The page at `url`; TimeoutError past `timeout_s`, OSError when the engine cannot
        be reached, PageError when its answer is not HTTP."""
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise PageError(f"only http:// engine URLs are scraped, not {url!r}")
        address = (parts.hostname, parts.port or 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/plain\r\n"
            "User-Agent: tokenpilot-autoscaler\r\n\r\n"
        ).encode()
        self._sweep()
        async with asyncio.timeout(timeout_s):
            reused = self._take(address)
            if reused is not None:
                try:
                    return await self._ask(address, reused, request)
                except (asyncio.IncompleteReadError, ConnectionError):
                    # The engine closed the idle connection before it read our request.
                    pass
            reader, writer = await asyncio.open_connection(*address, limit=MAX_HEAD_BYTES)
            return await self._ask(address, _Connection(reader, writer), request)

    async def _ask(self, address: tuple[str, int], conn: _Connection, request: bytes) -> Page:
        keep = False
        try:
            conn.writer.write(request)
            await conn.writer.drain()
            status, headers = await _head(conn.reader)
            body, keep = await _body(conn.reader, headers)
            keep = keep and headers.get("connection", "").lower() != "close"
            text = _decoded(body, headers.get("content-encoding", "identity"))
            return Page(status, text)
        finally:
            if keep:
                conn.idle_since_s = time.monotonic()
                self._idle.setdefault(address, []).append(conn)
            else:
                conn.close()

    def _take(self, address: tuple[str, int]) -> _Connection | None:
        pool = self._idle.get(address)
        while pool:
            conn = pool.pop()
            if not conn.reader.at_eof() and time.monotonic() - conn.idle_since_s < self.idle_s:
                return conn
            conn.close()
        return None

    def _sweep(self) -> None:
        """Close connections idle for longer than `idle_s` (engines that went away)."""
        now_s = time.monotonic()
        if now_s - self._swept_s < self.idle_s / 2:
            return
        self._swept_s = now_s
        for address in list(self._idle):
            kept = []
            for conn in self._idle[address]:
                if now_s - conn.idle_since_s < self.idle_s:
                    kept.append(conn)
                else:
                    conn.close()
            if kept:
                self._idle[address] = kept
            else:
                del self._idle[address]

    async def aclose(self) -> None:
        for pool in self._idle.values():
            for conn in pool:
                conn.close()
                with contextlib.suppress(Exception):
                    await conn.writer.wait_closed()
        self._idle.clear()


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status code and the headers (names in lower case)."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise PageError(f"response headers over {MAX_HEAD_BYTES} bytes") from None
    status_line, *lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise PageError(f"not an HTTP/1.x response: {status_line[:80]!r}")
    headers = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    if version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
        headers["connection"] = "close"
    return int(code), headers


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> tuple[bytes, bool]:
    """The body, and whether the connection may carry another request after it."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        size = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            try:
                length = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise PageError(f"bad chunk size {line[:40]!r}") from None
            if length == 0:
                # Trailers, if any, end with an empty line.
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                return b"".join(chunks), True
            size += length
            _check_size(size)
            chunks.append(await reader.readexactly(length))
            await reader.readexactly(2)
    if "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise PageError(f"bad Content-Length {headers['content-length']!r}") from None
        _check_size(length)
        return await reader.readexactly(length), True
    # Neither: the body runs to the end of the connection.
    body = b""
    while not reader.at_eof():
        body += await reader.read(MAX_PAGE_BYTES + 1 - len(body))
        _check_size(len(body))
    return body, False


def _check_size(size: int) -> None:
    if size > MAX_PAGE_BYTES:
        raise PageError(f"page over {MAX_PAGE_BYTES // (1024 * 1024)} MiB")


def _decoded(body: bytes, encoding: str) -> str:
    """The body as text. No encoding is asked for, but a gzip or deflate page is still read,
    up to MAX_PAGE_BYTES inflated."""
    encoding = encoding.lower()
    if encoding != "identity":
        gzip = zlib.MAX_WBITS | 16
        wbits = {"gzip": gzip, "x-gzip": gzip, "deflate": zlib.MAX_WBITS}
        if encoding not in wbits:
            raise PageError(f"page sent with Content-Encoding {encoding!r}")
        inflate = zlib.decompressobj(wbits[encoding])
        try:
            body = inflate.decompress(body, MAX_PAGE_BYTES + 1)
        except zlib.error as error:
            raise PageError(f"a {encoding} page that does not inflate: {error}") from None
        _check_size(len(body))
    return body.decode("utf-8", errors="replace")
