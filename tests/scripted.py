"""A scripted raw HTTP/1.1 upstream: the test writes the answer's exact bytes."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

from .loopback import loopback_server

Respond = Callable[[int, asyncio.StreamWriter], Awaitable[bool]]


class Scripted:
    """A raw HTTP/1.1 server: reads each request (head and Content-Length body), keeps
    it, and lets `respond(n, writer)` write whatever it likes; False drops the connection."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.connections = 0
        self.closed = 0
        self._closes = asyncio.Condition()

    async def closed_at_least(self, count: int) -> None:
        async with self._closes:
            await self._closes.wait_for(lambda: self.closed >= count)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                     if line.lower().startswith(b"content-length:")),
                    0,
                )  # fmt: skip
                self.requests.append((head, await reader.readexactly(length)))
                if not await self.respond(len(self.requests), writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went, or the test ended with the connection still open
        finally:
            writer.close()
            async with self._closes:
                self.closed += 1
                self._closes.notify_all()


@contextlib.asynccontextmanager
async def scripted(
    respond: Respond, tls: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[Scripted, str]]:
    """The upstream and its origin: https:// when it is given a server-side `tls` context."""
    upstream = Scripted(respond)
    scheme = "https" if tls is not None else "http"
    async with loopback_server(upstream.handle, tls) as server:
        yield upstream, f"{scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def answering(*chunks: bytes, keep: bool = True) -> Respond:
    """Writes `chunks` as the answer to every request."""

    async def respond(n: int, writer: asyncio.StreamWriter) -> bool:
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
        return keep

    return respond
