"""A real aiohttp upstream for tests that counts how often each operation ran."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import itertools
import os
import random
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from .loopback import loopback_server


async def read_raw_request(reader: asyncio.StreamReader) -> bytes:
    """One request off a raw HTTP/1.1 connection: its head, then its Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n")
         if line.lower().startswith(b"content-length:")),
        0,
    )  # fmt: skip
    return await reader.readexactly(length)


class RawUpstream:
    """A raw HTTP/1.1 server (`serving`) that counts requests; `respond` writes the answer
    to each, or returns False to drop the connection without one."""

    def __init__(self) -> None:
        self.count = 0

    async def respond(self, writer: asyncio.StreamWriter) -> bool:
        raise NotImplementedError

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await read_raw_request(reader)
                self.count += 1
                if not await self.respond(writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(upstream: RawUpstream) -> AsyncIterator[str]:
    """`upstream` on a loopback port, and its origin URL."""
    async with loopback_server(upstream.handle) as server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


@contextlib.asynccontextmanager
async def serving_app(
    app: web.Application, tls: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """An aiohttp application on a loopback port, and its origin URL (https with `tls`)."""
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=tls)
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def blob_chunks(size: int, chunk: int, seed: str) -> Iterator[bytes]:
    """The bytes `/blob` sends: `size` seeded pseudo-random bytes, `chunk` at a time."""
    rng = random.Random(seed)
    sent = 0
    while sent < size:
        piece = rng.randbytes(min(chunk, size - sent))
        sent += len(piece)
        yield piece


class CountingUpstream:
    """Endpoints that behave like a non-idempotent legacy API, with counters and gates.

    Every call is counted under (path, Idempotency-Key). `gate` lets a test hold a request
    inside the upstream: `entered` is set when one arrives, and it answers once `release`
    is set, so tests synchronise on events rather than sleeps.
    """

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str | None]] = Counter()
        self.ids = itertools.count(1)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.finished = asyncio.Event()
        self.seen_headers: list[dict[str, str]] = []

    def count(self, path: str, key: str | None = None) -> int:
        if key is None:
            return sum(n for (p, _), n in self.calls.items() if p == path)
        return self.calls[(path, key)]

    def _note(self, request: web.Request) -> None:
        self.calls[(request.path, request.headers.get("Idempotency-Key"))] += 1
        self.seen_headers.append(dict(request.headers))

    async def pay(self, request: web.Request) -> web.Response:
        body = await request.read()
        self._note(request)
        payload = {"id": f"pay_{next(self.ids)}", "size": len(body), "method": request.method}
        return web.Response(
            status=201,
            body=orjson.dumps(payload),
            content_type="application/json",
            headers={"X-Upstream": "yes", "Set-Cookie": "a=1"},
        )

    async def status(self, request: web.Request) -> web.Response:
        await request.read()
        self._note(request)
        code = int(request.match_info["code"])
        return web.Response(status=code, text=f"status {code} #{next(self.ids)}")

    async def gate(self, request: web.Request) -> web.Response:
        await request.read()
        self._note(request)
        self.entered.set()
        try:
            await self.release.wait()
        finally:
            self.finished.set()
        return web.Response(status=201, text=f"gated #{next(self.ids)}")

    async def stall(self, request: web.Request) -> web.Response:
        await request.read()
        self._note(request)
        self.entered.set()
        await asyncio.Event().wait()  # never answers; the gateway's timeout ends it
        raise AssertionError("unreachable")

    async def reset(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self._note(request)
        response = web.StreamResponse(status=200)
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b"partial")
        assert request.transport is not None
        request.transport.abort()  # connection cut mid-answer
        return response

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        self._note(request)
        return web.json_response({"headers": list(request.headers.items()), "size": len(body)})

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """A chunked answer of `size` random bytes in `chunk`-sized pieces."""
        await request.read()
        self._note(request)
        size = int(request.query.get("size", "0"))
        chunk = int(request.query.get("chunk", "65536"))
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/binary"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        sent = 0
        while sent < size:
            piece = os.urandom(min(chunk, size - sent))
            await response.write(piece)
            sent += len(piece)
        await response.write_eof()
        return response

    async def blob(self, request: web.Request) -> web.StreamResponse:
        """`size` seeded pseudo-random bytes with a Content-Length, written `chunk` at a time;
        `cut=1` drops the connection before the last chunk, `gate=1` waits for `release`."""
        await request.read()
        self._note(request)
        size = int(request.query.get("size", "0"))
        chunk = int(request.query.get("chunk", "262144"))
        if request.query.get("gate"):
            self.entered.set()
            await self.release.wait()
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/pdf"})
        for cookie in ("b=2", "a=1", "b=3"):  # repeated, in an order a replay must keep
            response.headers.add("Set-Cookie", cookie)
        response.content_length = size
        await response.prepare(request)
        sent = 0
        for piece in blob_chunks(size, chunk, request.query.get("seed", "0")):
            if request.query.get("cut") and sent + len(piece) >= size:
                assert request.transport is not None
                request.transport.abort()
                return response
            await response.write(piece)
            sent += len(piece)
        await response.write_eof()
        return response

    async def gzipped(self, request: web.Request) -> web.Response:
        """A gzip-encoded body (Content-Encoding: gzip) of `size` random bytes."""
        await request.read()
        self._note(request)
        raw = random.Random(request.query.get("seed", "0")).randbytes(
            int(request.query.get("size", "0"))
        )
        return web.Response(
            body=gzip.compress(raw, mtime=0),
            headers={"Content-Encoding": "gzip", "Content-Type": "text/csv"},
        )

    async def plain(self, request: web.Request) -> web.Response:
        self._note(request)
        return web.Response(text="plain")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/pay", self.pay)
        app.router.add_route("*", "/pay/{tail:.*}", self.pay)
        app.router.add_route("*", "/status/{code}", self.status)
        app.router.add_route("*", "/gate", self.gate)
        app.router.add_route("*", "/stall", self.stall)
        app.router.add_route("*", "/reset", self.reset)
        app.router.add_route("*", "/echo", self.echo)
        app.router.add_route("*", "/stream", self.stream)
        app.router.add_route("*", "/plain", self.plain)
        app.router.add_route("*", "/blob", self.blob)
        app.router.add_route("*", "/gzip", self.gzipped)
        return app
