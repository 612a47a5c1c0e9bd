"""Malformed requests on a raw socket: a 4xx from the gateway, no traceback, nothing stored."""

from __future__ import annotations

import logging

import orjson
import pytest

from .faultkit import redis_keys
from .gateways import GatewayFactory
from .rawhttp import exchange, status_of
from .upstream import CountingUpstream

HEAD = b"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n"


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
        assert record.levelno < logging.ERROR or "unavailable" in record.getMessage()


K = b"Idempotency-Key: k\r\n"
CHUNKED = K + b"Transfer-Encoding: chunked\r\n\r\n"
EMPTY = b"Content-Length: 0\r\n\r\n"
MALFORMED = {
    "bad chunk size": HEAD + CHUNKED + b"zz\r\nab\r\n0\r\n\r\n",
    "bad chunk after a good one": HEAD + CHUNKED + b"2\r\nab\r\nq\r\n",
    "chunk longer than declared": HEAD + CHUNKED + b"2\r\nabcdef\r\n0\r\n\r\n",
    "length and chunked": HEAD + K + b"Content-Length: 3\r\n" + CHUNKED[len(K) :] + b"0\r\n\r\n",
    "bad content-length": HEAD + K + b"Content-Length: abc\r\n\r\nabc",
    "two content-lengths": HEAD + K + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    "huge header": HEAD + K + b"X-Big: " + b"a" * 70_000 + b"\r\n" + EMPTY,
    "many headers": HEAD + K + b"X-H: v\r\n" * 20_000 + EMPTY,
    "invalid utf-8 key": HEAD + b"Idempotency-Key: \xff\xfe\x80\r\nContent-Length: 1\r\n\r\nx",
    "control byte in key": HEAD + b"Idempotency-Key: a\x01b\r\nContent-Length: 1\r\n\r\nx",
    "bad request line": b"POST /pay HTTP/9.9 what\r\n" + K + b"\r\n",
    "space in header name": HEAD + b"Idempotency Key : k\r\nBad Name: v\r\n" + EMPTY,
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
async def test_malformed_request_is_4xx_and_nothing_stored(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
    raw: bytes,
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    assert client.port is not None
    reply = await exchange(client.port, raw)
    assert 400 <= status_of(reply) < 500
    assert b"Traceback" not in reply
    assert counting.count("/pay") == 0
    assert redis_keys(redis_url) == []
    no_traceback(caplog)


async def test_body_cut_short_is_not_forwarded_or_stored(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    assert client.port is not None
    raw = HEAD + b"Idempotency-Key: k\r\nContent-Length: 100\r\n\r\nonly this"
    reply = await exchange(client.port, raw, half_close=True)
    if reply:  # the client has hung up; if anything was answered, it is a 4xx
        assert 400 <= status_of(reply) < 500
    assert counting.count("/pay") == 0
    assert redis_keys(redis_url) == []
    no_traceback(caplog)


async def test_invalid_utf8_in_another_header_is_refused_not_altered(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    assert client.port is not None
    raw = HEAD + b"Idempotency-Key: k\r\nX-Name: caf\xe9 \xff\r\nContent-Length: 1\r\n\r\nx"
    reply = await exchange(client.port, raw)
    assert status_of(reply) == 400
    assert b"X-Name" in reply
    assert counting.count("/pay") == 0
    assert redis_keys(redis_url) == []
    no_traceback(caplog)
    # Valid UTF-8 is forwarded as it came.
    raw = HEAD.replace(b"/pay", b"/echo") + (
        "Idempotency-Key: k\r\nX-Name: café\r\nContent-Length: 1\r\n\r\nx".encode()
    )
    reply = await exchange(client.port, raw)
    assert status_of(reply) == 200
    assert ["X-Name", "café"] in orjson.loads(reply.split(b"\r\n\r\n", 1)[1])["headers"]


@pytest.mark.parametrize(
    "body",
    [bytes(range(256)) * 4, b"", b"\x00", b"\xff\xfe\r\n\r\n"],
    ids=["binary", "empty", "nul", "crlf"],
)
async def test_binary_and_empty_bodies_are_forwarded_once_and_replayed(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], body: bytes
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    headers = {"Idempotency-Key": "k", "Content-Type": "application/octet-stream"}
    first = await client.post("/echo", data=body, headers=headers)
    assert first.status == 200
    first_body = await first.read()
    second = await client.post("/echo", data=body, headers=headers)
    assert second.headers["Idempotent-Replayed"] == "true"
    assert await second.read() == first_body
    assert counting.count("/echo") == 1
    other = await client.post("/echo", data=body + b"!", headers=headers)
    assert other.status == 422
