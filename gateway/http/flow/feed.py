"""Between the upstream's answer and the client: a bounded queue, so that recording an answer
runs at the upstream's pace whatever the client does.

The task that reads the upstream (`forward._Call`) hands the head and the body to a
`ClientFeed`; the request's own task writes them to the client (`ClientFeed.serve`). A
client that falls more than `bound` bytes behind gets nothing more from the queue: once the
answer is stored, the rest of the body is read back from the record (`Rest`). A client that
takes nothing at all is cut by the server's write timeout (`http.server.limits`), and a client that
is gone is simply forgotten: the reader never waits for either.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing, suppress
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from gateway.errors import BlobError
from gateway.http.answers.writing import abort, send


@dataclass(frozen=True, slots=True)
class Rest:
    """The stored body, for a client that fell behind: it gets the bytes from `skip` on,
    checked against the recorded size and digest before its last bytes are written."""

    chunks: Callable[[], AsyncGenerator[bytes, None]]  # the whole stored body, from its start
    skip: int
    size: int
    sha256: str


class _Cut:
    """The answer broke after its head: the client's connection is closed short of it."""


PIECE: Final = 64 << 10  # what a client fed from the record is written at a time
_END: Final = object()
_CUT: Final = _Cut()
_Item = web.StreamResponse | bytes | Rest | _Cut | object


class ClientFeed:
    """The reader's side: `begin`, `offer`/`put`, then `end`, `finish` or `cut` (or `fail`
    before anything was begun). The writer's side: `serve`."""

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._items: collections.deque[_Item] = collections.deque()
        self._queued = 0  # body bytes in `_items`
        self._given = 0  # body bytes handed to the queue so far
        self._ready: asyncio.Future[None] | None = None  # the writer waits for items
        self._room: asyncio.Future[None] | None = None  # the reader waits for room (`put`)
        self.behind = False  # the queue overflowed: the rest comes from the record
        self.gone = False  # the client went away or was cut: nothing more is queued
        self.final: web.StreamResponse | None = None  # the whole answer, nothing streamed
        self.started = False  # something was queued that sends the head

    # The reader's side.

    def begin(self, response: web.StreamResponse, eager: bool) -> None:
        """The answer's head; `eager` sends it at once, else with the first body bytes."""
        self._items.append(response)  # the writer wakes for it with what follows
        if eager:
            self.started = True
            self._push(b"")

    def offer(self, chunk: bytes) -> None:
        """Queue body bytes unless the client is too far behind; never waits."""
        if self.gone or self.behind:
            return
        if self._queued + len(chunk) > self._bound and self._queued:
            self.behind = True  # what is queued still goes; the rest from `_given` on
            return
        self._given += len(chunk)
        self._queued += len(chunk)
        self.started = True
        self._push(chunk)

    async def put(self, chunk: bytes) -> None:
        """Queue body bytes, waiting while the queue is full (an answer that is not kept:
        the client's own pace, bounded by the server's write timeout)."""
        if self.behind:
            return  # a client already behind cannot be given these: it will be cut
        while not self.gone and self._queued >= self._bound:
            self._room = asyncio.get_running_loop().create_future()
            await self._room
        if not self.gone:
            self._given += len(chunk)
            self._queued += len(chunk)
            self.started = True
            self._push(chunk)

    def end(self) -> None:
        """The body is complete in the queue."""
        self._push(_END)

    def finish(self, rest: Rest | None) -> None:
        """The answer is stored: the end of the queue, or for a client that fell behind the
        rest from the record (none: it was not kept, and the client is cut)."""
        if not self.behind:
            self.end()
        elif rest is None:
            self.cut()
        else:
            self._push(Rest(rest.chunks, self._given, rest.size, rest.sha256))

    def cut(self) -> None:
        """Close the client's connection short of the answer (before its head, if none was
        begun): the client gets no complete answer."""
        self._push(_CUT)

    def fail(self, response: web.StreamResponse) -> None:
        """The whole answer, when nothing of the upstream's has started to go out."""
        self.final = response
        self._push(_END)

    def _push(self, item: _Item) -> None:
        self._items.append(item)
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    # The writer's side.

    async def serve(self, request: web.Request) -> web.StreamResponse:
        """Write what the reader hands over to the client; the response aiohttp finishes."""
        response: web.StreamResponse | None = None
        try:
            while True:
                item = await self._next()
                if isinstance(item, web.StreamResponse):
                    response = item
                elif isinstance(item, bytes):
                    assert response is not None
                    if not await send(response, request, item):
                        return response
                elif isinstance(item, Rest):
                    assert response is not None
                    if not await _send_rest(response, request, item):
                        return abort(request, response)
                    return response
                elif isinstance(item, _Cut):  # with no head begun, nothing at all is sent
                    return abort(request, response or web.Response(status=502))
                else:  # the end
                    if self.final is not None:
                        return self.final
                    assert response is not None
                    if await send(response, request, b""):
                        with suppress(ConnectionError, RuntimeError):
                            await response.write_eof()
                    return response
        finally:
            self._forget()

    async def _next(self) -> _Item:
        while not self._items:
            self._ready = asyncio.get_running_loop().create_future()
            await self._ready
        item = self._items.popleft()
        if isinstance(item, bytes):
            self._queued -= len(item)
            if self._room is not None and not self._room.done() and self._queued < self._bound:
                self._room.set_result(None)
        return item

    def _forget(self) -> None:
        """The writer is done (or the client gone): the reader carries on alone."""
        self.gone = True
        self._items.clear()
        self._queued = 0
        if self._room is not None and not self._room.done():
            self._room.set_result(None)


async def _send_rest(response: web.StreamResponse, request: web.Request, rest: Rest) -> bool:
    """The stored body from `rest.skip` on; its last bytes only once the whole body matched
    its record. False when it did not (or the client went away)."""
    digest = hashlib.sha256()
    seen = 0
    held = b""
    try:
        async with aclosing(rest.chunks()) as chunks:
            async for chunk in chunks:
                digest.update(chunk)
                start = max(0, rest.skip - seen)
                seen += len(chunk)
                # In pieces: a stalled client's transport holds one piece past its mark,
                # not a whole read of the store.
                for at in range(start, len(chunk), PIECE):
                    if held and not await send(response, request, held):
                        return False
                    held = chunk[at : at + PIECE]
    except BlobError:
        return False
    if seen != rest.size or (rest.sha256 and digest.hexdigest() != rest.sha256):
        return False
    if not await send(response, request, held):
        return False
    try:
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        return False
    return True
