"""asyncio servers on loopback for the tests' raw upstreams and relays, and a listener that
keeps a connection waiting (its accept queue full)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

Handle = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
# A `serving` handler: each connection, and its number (from 1).
Relay = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


@contextlib.asynccontextmanager
async def loopback_server(
    handle: Handle, tls: ssl.SSLContext | None = None
) -> AsyncIterator[asyncio.Server]:
    """asyncio's server for `handle` on a loopback port it binds (port 0), its connections
    closed as it stops: since Python 3.12.1 `wait_closed` waits for them, and a gateway
    still running (it is torn down after) keeps its idle ones open."""
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


@contextlib.contextmanager
def full_listener() -> Iterator[socket.socket]:
    """A loopback listener with room for one waiting connection (backlog 0), which another
    takes: a new connection's SYN is dropped, and sent again by its kernel (after a second,
    then two more, four...), until the listener accepts that one (`make_room`)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    filler = socket.create_connection(listener.getsockname())
    try:
        yield listener
    finally:
        filler.close()
        listener.close()


def make_room(listener: socket.socket) -> None:
    """Accept the connection a `full_listener` keeps waiting, and close it; from now on the
    listener is non-blocking, for `loop.sock_accept`."""
    listener.accept()[0].close()
    listener.setblocking(False)


def connecting_to(port: int) -> bool:
    """Whether a socket of this machine waits for its SYN to be answered by `port`."""
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[2].endswith(f":{port:04X}") and fields[3] == "02":  # SYN_SENT
                return True
    return False
