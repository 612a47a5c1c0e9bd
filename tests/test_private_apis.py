"""The private attributes of aiohttp that the gateway relies on still do what it needs.

Each test shows the behaviour with the attribute set as the gateway sets it, and the
library's default beside it, so that a release that renames or drops the attribute fails
here rather than silently in production.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.http.answers.writing import send_head, start_response
from gateway.upstream import aiohttp_client


class _DropsSecondRequest:
    """An upstream that answers the first request of each connection and, on the first
    connection only, reads the second request whole and closes without answering: the
    outcome of that request is unknown to its sender."""

    def __init__(self) -> None:
        self.seen: collections.Counter[str] = collections.Counter()
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        first_connection = self.connections == 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(
                    (int(line.split(":", 1)[1]) for line in lines
                     if line.lower().startswith("content-length:")), 0,
                )  # fmt: skip
                await reader.readexactly(length)
                self.seen[path] += 1
                served += 1
                if first_connection and served == 2:
                    return  # read it, never answer: the connection just closes
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def _put_twice(session: aiohttp.ClientSession, origin: str) -> None:
    async with session.put(f"{origin}/first", data=b"x") as first:
        await first.read()
    with pytest.raises(aiohttp.ClientError):
        async with session.put(f"{origin}/second", data=b"x") as second:
            await second.read()


async def test_aiohttp_would_resend_a_put_that_the_gateways_session_sends_once() -> None:
    # The gateway's session: the dropped PUT reached the upstream once, and failed.
    upstream = _DropsSecondRequest()
    async with upstream as origin:
        session = aiohttp_client.session(4)
        try:
            await _put_twice(session, origin)
        finally:
            await session.close()
    assert upstream.seen["/second"] == 1

    # aiohttp's default resends it on a fresh connection: the upstream runs it twice.
    upstream = _DropsSecondRequest()
    async with upstream as origin, aiohttp.ClientSession() as default:
        async with default.put(f"{origin}/first", data=b"x") as first:
            await first.read()
        async with default.put(f"{origin}/second", data=b"x") as second:
            assert second.status == 200
    assert upstream.seen["/second"] == 2


WRITTEN = web.AppKey("written", dict)


@pytest.fixture
async def head_probe() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    written: dict[str, int] = {}

    async def held(request: web.Request) -> web.StreamResponse:
        response = start_response(201, None, [("X-A", "1")], 5)
        await response.prepare(request)
        written["held"] = request.writer.output_size
        await response.write(b"hello")
        await response.write_eof()
        return response

    async def plain(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=201)
        response.content_length = 5
        await response.prepare(request)
        written["plain"] = request.writer.output_size
        await response.write(b"hello")
        await response.write_eof()
        return response

    async def sent(request: web.Request) -> web.StreamResponse:
        response = start_response(201, None, [("X-A", "1")], 5)
        await response.prepare(request)
        send_head(response)  # a follower's: its head goes before any body bytes
        written["sent"] = request.writer.output_size
        await response.write(b"hello")
        await response.write_eof()
        return response

    app = web.Application()
    app[WRITTEN] = written
    app.router.add_get("/held", held)
    app.router.add_get("/sent", sent)
    app.router.add_get("/plain", plain)
    async with TestClient(TestServer(app)) as client:
        yield client


async def test_a_streamed_answer_holds_its_head_until_the_first_body_bytes(
    head_probe: TestClient[web.Request, web.Application],
) -> None:
    for path in ("/held", "/plain"):
        async with head_probe.get(path) as response:
            assert await response.read() == b"hello"
    written = head_probe.server.app[WRITTEN]
    assert written["held"] == 0  # nothing on the wire after prepare(): head goes with body
    assert written["plain"] > 0  # aiohttp's default sends the head at once


async def test_a_held_head_is_sent_at_once_when_asked(
    head_probe: TestClient[web.Request, web.Application],
) -> None:
    async with head_probe.get("/sent") as response:
        assert response.headers["X-A"] == "1"
        assert await response.read() == b"hello"
    assert head_probe.server.app[WRITTEN]["sent"] > 0  # on the wire before the body


async def test_a_streamed_answer_carries_no_server_header_the_upstream_did_not_send() -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        server = request.query.get("server")
        headers = [("Server", server)] if server else []
        response = start_response(201, "Order Accepted", headers, 2)
        await response.prepare(request)
        await response.write(b"ok")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/", answer)
    async with TestClient(TestServer(app)) as client:
        async with client.get("/") as bare:
            assert "Server" not in bare.headers
            assert bare.reason == "Order Accepted"
        async with client.get("/?server=legacy/1.0") as kept:
            assert kept.headers.getall("Server") == ["legacy/1.0"]


async def test_a_streamed_answers_head_is_written_as_its_bytes_where_aiohttp_writes_utf_8() -> None:
    """The head waits in the writer's `_headers_buf` until the first body bytes; the gateway
    puts its bytes there. aiohttp itself writes header text as UTF-8."""

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.query.get("plain"):
            response = web.StreamResponse(status=200, headers={"X-Name": "caf\xe9"})
        else:
            response = start_response(200, "Tr\xe8s bien", [("X-Name", "caf\xe9")], 2)
        await response.prepare(request)
        await response.write(b"ok")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/", answer)
    async with TestServer(app, host="127.0.0.1") as server:
        for query, reason, value in (
            ("", b"Tr\xe8s bien", b"caf\xe9"),
            ("?plain=1", b"OK", b"caf\xc3\xa9"),
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(f"GET /{query} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
            reply = await reader.read()
            writer.close()
            await writer.wait_closed()
            assert reply.startswith(b"HTTP/1.1 200 " + reason + b"\r\n")
            assert b"\r\nX-Name: " + value + b"\r\n" in reply
