"""What must never make an operation run twice or look lost on the upstream side: aiohttp's
silent resends, a slow client, encoded paths, 100-continue and absolute-form targets."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.config.loading import settings_from_dict

from .gateways import GatewayFactory, gateway_settings
from .upstream import RawUpstream, serving


class Charging(RawUpstream):
    """Answers every request with 201 and the number of its run."""

    async def respond(self, writer: asyncio.StreamWriter) -> bool:
        body = b'{"run":%d}' % self.count
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        return True


class DroppingUpstream(Charging):
    """Does the work for the first request, then drops the connection without answering
    (as a crash after the charge would)."""

    async def respond(self, writer: asyncio.StreamWriter) -> bool:
        if self.count == 1:
            return False  # worked, then gone
        return await super().respond(writer)


@pytest.fixture
async def dropping() -> AsyncIterator[tuple[DroppingUpstream, str]]:
    upstream = DroppingUpstream()
    async with serving(upstream) as origin:
        yield upstream, origin


@pytest.mark.parametrize("method", ["PUT", "POST", "PATCH"])
async def test_a_dropped_connection_is_never_resent(
    make_gateway: GatewayFactory, dropping: tuple[DroppingUpstream, str], method: str
) -> None:
    upstream, origin = dropping
    client = await make_gateway(settings=gateway_settings(origin, on_unknown_outcome="record"))
    first = await client.request(method, "/orders/1", data=b"x", headers={"Idempotency-Key": "k"})
    assert first.status == 502
    assert first.headers["Idempotency-Outcome"] == "unknown"
    retry = await client.request(method, "/orders/1", data=b"x", headers={"Idempotency-Key": "k"})
    assert retry.status == 502 and retry.headers["Idempotent-Replayed"] == "true"
    assert upstream.count == 1


async def test_a_slow_client_does_not_turn_a_recorded_answer_into_a_timeout(
    redis_url: str, tmp_path: Path, make_gateway: GatewayFactory
) -> None:
    size = 24 << 20  # more than the socket buffers hold, so the gateway must wait for us
    calls = 0

    async def pay(request: web.Request) -> web.Response:
        nonlocal calls
        await request.read()
        calls += 1
        return web.Response(status=201, body=b"a" * size)

    app = web.Application()
    app.router.add_post("/pay", pay)
    upstream = TestServer(app, host="127.0.0.1")
    await upstream.start_server()
    try:
        origin = str(upstream.make_url("")).rstrip("/")
        settings = gateway_settings(
            origin, blob={"url": f"file://{tmp_path}/blobs"}, timeouts={"total": "1s"}
        )
        client = await make_gateway(settings=settings)
        reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
        writer.write(b"POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow\r\n"
                     b"Content-Length: 1\r\n\r\nx")  # fmt: skip
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 201")
        await asyncio.sleep(2.5)  # the slow client under test: reads nothing for > total
        digest, got = hashlib.sha256(), 0
        while got < size:
            chunk = await asyncio.wait_for(reader.read(1 << 20), 10)
            assert chunk, f"answer cut after {got} bytes"
            digest.update(chunk)
            got += len(chunk)
        writer.close()
        assert digest.hexdigest() == hashlib.sha256(b"a" * size).hexdigest()
        retry = await client.post("/pay", data=b"x", headers={"Idempotency-Key": "slow"})
        assert retry.status == 201 and retry.headers["Idempotent-Replayed"] == "true"
        assert calls == 1
    finally:
        await upstream.close()


async def test_encoded_slash_is_another_request(make_gateway: GatewayFactory, upstream) -> None:
    counting, _ = upstream
    client = await make_gateway()
    key = {"Idempotency-Key": "path"}
    assert (await client.post("/pay/a%2Fb", data=b"x", headers=key)).status == 201
    other = await client.post("/pay/a/b", data=b"x", headers=key)
    assert other.status == 422
    plus = {"Idempotency-Key": "query"}
    assert (await client.post("/pay?a=+", data=b"x", headers=plus)).status == 201
    assert (await client.post("/pay?a=%20", data=b"x", headers=plus)).status == 422
    assert counting.count("/pay/a/b") == 1  # the upstream sees the first one's decoded path


async def raw_post(port: int, target: bytes, key: bytes) -> bytes:
    """POST `target` exactly as given (aiohttp's client would resolve its dot segments)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
                 b"Content-Length: 1\r\n\r\nx" % (target, key))  # fmt: skip
    answer = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    return answer


@pytest.mark.parametrize(
    "target",
    [
        b"/public/../pay/1",
        b"/public/%2e%2e/pay/1",
        b"//pay/1",
        b"/x/..\\pay/1",  # a backslash read as a slash
        b"/x/..;/pay/1",  # Tomcat's `..;`
        b"/pay;v=2/1",  # a path parameter
        b"/PAY/1",  # an upstream that ignores case
        b"/pay/..",  # as sent, under /pay (resolved, it is /)
        b"/x%2Fy/../pay/1",  # resolved before decoding (RFC 3986, WHATWG)
    ],
)
async def test_a_path_that_resolves_into_a_protected_route_is_protected(
    make_gateway: GatewayFactory, target: bytes
) -> None:
    """Some upstream runs each of these as /pay/1 (or under /pay): the gateway must not
    forward them as unprotected requests."""
    upstream = Charging()
    async with serving(upstream) as origin:
        settings = settings_from_dict(
            {
                "upstream": origin,
                "routes": [{"name": "pay", "path_prefix": "/pay", "upstream": origin}],
            }
        )
        client = await make_gateway(settings=settings)
        first = await raw_post(client.port, target, b"twice")
        again = await raw_post(client.port, target, b"twice")
    assert first.startswith(b"HTTP/1.1 201") and again.startswith(b"HTTP/1.1 201")
    assert b"Idempotent-Replayed: true" in again
    assert upstream.count == 1


async def test_expect_100_continue_is_not_forwarded(make_gateway: GatewayFactory, upstream) -> None:
    counting, _ = upstream
    client = await make_gateway()
    headers = {"Idempotency-Key": "e", "Expect": "100-continue"}
    resp = await client.post("/echo", data=b"y" * 2048, headers=headers)
    assert resp.status == 200
    seen = {k.lower() for k, _ in orjson.loads(await resp.read())["headers"]}
    assert "expect" not in seen
    assert counting.count("/echo") == 1


async def test_absolute_form_target_goes_to_the_route_upstream(
    make_gateway: GatewayFactory, upstream
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(
        b"POST http://elsewhere.example/pay?x=1 HTTP/1.1\r\nHost: elsewhere.example\r\n"
        b"Idempotency-Key: abs\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx"
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
    assert counting.count("/pay", "abs") == 1


async def test_utf8_header_bytes_pass_through_and_replay_unchanged(
    make_gateway: GatewayFactory,
) -> None:
    disposition = 'attachment; filename="facture-été.pdf"'

    async def invoice(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=201, body=b"%PDF", headers={"Content-Disposition": disposition})

    app = web.Application()
    app.router.add_post("/invoice", invoice)
    upstream = TestServer(app, host="127.0.0.1")
    await upstream.start_server()
    try:
        client = await make_gateway(
            settings=gateway_settings(str(upstream.make_url("")).rstrip("/"))
        )
        raw = disposition.encode("utf-8")
        for replayed in (False, True):
            resp = await client.post("/invoice", data=b"x", headers={"Idempotency-Key": "inv"})
            assert resp.status == 201
            assert ("Idempotent-Replayed" in resp.headers) is replayed
            assert (b"Content-Disposition", raw) in resp.raw_headers
    finally:
        await upstream.close()


class StrayCrlfUpstream(RawUpstream):
    """Answers every request with a complete 201, then sends a stray CRLF (which some
    servers do after a body) on the kept-alive connection."""

    async def respond(self, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()
        await asyncio.sleep(0.05)  # the upstream's timing: the CRLF comes on its own
        writer.write(b"\r\n")
        await writer.drain()
        return True


@pytest.fixture
async def stray_crlf() -> AsyncIterator[tuple[StrayCrlfUpstream, str]]:
    upstream = StrayCrlfUpstream()
    async with serving(upstream) as origin:
        yield upstream, origin


async def test_bytes_after_a_complete_answer_never_fail_it_or_the_next_call(
    make_gateway: GatewayFactory, stray_crlf: tuple[StrayCrlfUpstream, str]
) -> None:
    """A read timer that the stray bytes restart would fail the finished answer or, on the
    pooled connection, the next call as a timeout (its key released, or kept unknown)."""
    upstream, origin = stray_crlf
    client = await make_gateway(
        settings=gateway_settings(origin, on_unknown_outcome="record", timeouts={"total": "200ms"})
    )
    for key in ("first", "second"):
        answer = await client.post("/pay", data=b"x", headers={"Idempotency-Key": key})
        assert answer.status == 201, await answer.text()
        assert await answer.read() == b"hello"
        # Longer than `total` idle in the pool, so any read timer left armed would fire.
        await asyncio.sleep(0.5)
    assert upstream.count == 2


async def test_a_compressed_request_body_is_forwarded_as_sent(
    make_gateway: GatewayFactory, upstream
) -> None:
    """The gateway must not unpack a gzip request body and forward it still labelled gzip."""
    plain = b'{"amount": 100, "currency": "EUR"}' * 50
    packed = gzip.compress(plain)
    client = await make_gateway()
    headers = {"Idempotency-Key": "gz", "Content-Encoding": "gzip"}
    answer = await client.post("/echo", data=packed, headers=headers)
    assert answer.status == 200, await answer.text()
    assert (await answer.json())["size"] == len(plain)  # the upstream unpacked what we sent
    # The fingerprint is over the bytes as sent: the same bytes replay, others are refused.
    assert (await client.post("/echo", data=packed, headers=headers)).status == 200
    other = gzip.compress(plain + b" ")
    assert (await client.post("/echo", data=other, headers=headers)).status == 422
