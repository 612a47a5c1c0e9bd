"""An upstream that streams server-sent events as a test hands them over, one at a time, and
counts how often each stream ran; and a client's side of such a stream, read as it comes."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient

HEAD = b""  # handed over: send the head now, without body bytes
END = None  # handed over: end the answer
READ: float = 10.0  # bound on waiting for bytes that the test knows were sent


def event(n: int, data: str = "") -> bytes:
    return f"id: {n}\ndata: {data or f'event {n}'}\n\n".encode()


class EventsUpstream:
    """POST /events/<name>[?status=N]: a `text/event-stream` answer whose head and body
    bytes go out as the test gives them (`give`); `/cut/<name>` drops the connection once
    its bytes are given."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._given: defaultdict[str, asyncio.Queue[bytes | None]] = defaultdict(asyncio.Queue)
        self.running: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def give(self, name: str, *items: bytes | None) -> None:
        for item in items:
            self._given[name].put_nowait(item)

    async def events(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        await request.read()
        self.calls[name] += 1
        self.running[name].set()
        status = int(request.query.get("status", "200"))
        response = web.StreamResponse(
            status=status,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        )
        response.enable_chunked_encoding()
        given = self._given[name]
        while (item := await given.get()) is not END:
            if not response.prepared:
                await response.prepare(request)
            if item:
                await response.write(item)
        if not response.prepared:
            await response.prepare(request)
        if request.path.startswith("/cut/"):
            assert request.transport is not None
            request.transport.abort()
            return response
        await response.write_eof()
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/events/{name}", self.events)
        app.router.add_post("/cut/{name}", self.events)
        return app


class Reader:
    """A client's answer read as it comes."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.body = b""

    async def until(self, data: bytes) -> None:
        """Read until the body ends with `data` (within READ seconds)."""
        async with asyncio.timeout(READ):
            while not self.body.endswith(data):
                piece = await self.response.content.readany()
                assert piece, f"ended at {self.body!r}, before {data!r}"
                self.body += piece

    async def rest(self) -> bytes:
        async with asyncio.timeout(READ):
            self.body += await self.response.content.read()
        return self.body


async def post(client: TestClient, path: str, key: str, **headers: str) -> Reader:
    response = await client.post(path, data=b"{}", headers={"Idempotency-Key": key, **headers})
    return Reader(response)


async def replayed(client: TestClient, path: str, key: str) -> bytes:
    response = await client.post(path, data=b"{}", headers={"Idempotency-Key": key})
    assert response.headers.get("Idempotent-Replayed") == "true"
    return await response.read()
