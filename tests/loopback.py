"""asyncio servers on loopback for the tests' raw upstreams and relays."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

Handle = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
# A `serving` handler: each connection, and its number (from 1).
Relay = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


@contextlib.asynccontextmanager
async def loopback_server(
    handle: Handle, tls: ssl.SSLContext | None = None
) -> AsyncIterator[asyncio.Server]:
    """asyncio's server for `handle` on a free loopback port, its connections closed as it
    stops: since Python 3.12.1 `wait_closed` waits for them, and a gateway still running (it
    is torn down after) keeps its idle ones open."""
    connections: set[asyncio.StreamWriter] = set()

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.add(writer)
        try:
            await handle(reader, writer)
        finally:
            connections.discard(writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0, ssl=tls)
    try:
        yield server
    finally:
        server.close()
        for writer in connections:
            writer.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def serving(handle: Relay) -> AsyncIterator[int]:
    """A loopback server whose `handle` gets each connection and its number (from 1)."""
    count = 0
    tasks: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        count += 1
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handle(reader, writer, count)
        finally:
            writer.close()
            tasks.discard(task)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
