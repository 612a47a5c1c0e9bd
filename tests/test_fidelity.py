"""A replay is the upstream's answer: its reason phrase and headers as it sent them, and no
header the upstream did not send beyond the documented ones."""

from __future__ import annotations

import gzip
import hashlib

import orjson
import pytest
from redis.asyncio import Redis

from gateway.core.keys import digest, hashed_record_key, tenant_id
from gateway.http.answers.writing import head_bytes

from .gateways import GatewayFactory, gateway_settings
from .rawhttp import exchange
from .scripted import answering, scripted


def head_lines(reply: bytes) -> list[bytes]:
    return reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n")


REQUEST = (
    b"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nIdempotency-Key: %s\r\n"
    b"Content-Length: 1\r\n\r\nx"
)


@pytest.mark.parametrize(
    "status_line", [b"HTTP/1.1 201 Order Accepted", b"HTTP/1.1 201 CREATED", b"HTTP/1.1 200 "]
)
async def test_the_reason_phrase_is_recorded_and_replayed(
    status_line: bytes, make_gateway: GatewayFactory, redis_url: str
) -> None:
    answer = status_line + b"\r\nContent-Length: 2\r\nX-A: 1\r\n\r\nok"
    async with scripted(answering(answer)) as (upstream, origin):
        client = await make_gateway(settings=gateway_settings(origin))
        first = await exchange(client.port, REQUEST % b"r1")
        replay = await exchange(client.port, REQUEST % b"r1")
    assert len(upstream.requests) == 1
    for reply in (first, replay):
        lines = head_lines(reply)
        assert lines[0] == status_line
        assert not any(line.lower().startswith(b"server:") for line in lines)
    assert b"Idempotent-Replayed: true" in replay


async def test_the_upstreams_own_server_header_is_kept(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    answer = b"HTTP/1.1 201 Created\r\nServer: legacy-erp/4.2\r\nContent-Length: 2\r\n\r\nok"
    async with scripted(answering(answer)) as (_, origin):
        client = await make_gateway(settings=gateway_settings(origin))
        replies = [await exchange(client.port, REQUEST % b"s1") for _ in range(2)]
    for reply in replies:
        servers = [line for line in head_lines(reply) if line.lower().startswith(b"server:")]
        assert servers == [b"Server: legacy-erp/4.2"]


OBS_TEXT = (
    b"HTTP/1.1 201 Cr\xe9\xe9\r\nX-Name: caf\xe9\r\nSet-Cookie: a=1\r\nX-Utf8: \xc3\xa9\r\n"
    b"Set-Cookie: b=\xff\r\nContent-Length: 2\r\n\r\nok"
)
SENT_HEAD = [
    b"X-Name: caf\xe9",
    b"Set-Cookie: a=1",
    b"X-Utf8: \xc3\xa9",
    b"Set-Cookie: b=\xff",
    b"Content-Length: 2",
]
# In a tenant's scope: cookies are replayed there (never in the shared anonymous scope).
SCOPED = REQUEST.replace(b"Host: gw\r\n", b"Host: gw\r\nAuthorization: Bearer t\r\n")
PASSED = b"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx"


async def test_header_bytes_reach_the_client_as_sent_first_replayed_and_passed_through(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    async with scripted(answering(OBS_TEXT)) as (upstream, origin):
        client = await make_gateway(settings=gateway_settings(origin))
        first = await exchange(client.port, SCOPED % b"bytes-1")  # the httptools client
        replay = await exchange(client.port, SCOPED % b"bytes-1")
        passed = await exchange(client.port, PASSED)  # streamed: aiohttp's client
    assert len(upstream.requests) == 2
    for reply in (first, replay, passed):
        lines = head_lines(reply)
        assert lines[0] == b"HTTP/1.1 201 Cr\xe9\xe9"
        assert lines[1:6] == SENT_HEAD  # names, bytes, order and repeats
        assert reply.endswith(b"\r\n\r\nok")


async def test_a_record_stored_before_header_bytes_were_kept_replays_as_it_did(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    """A record of the earlier encoding (header text decoded as UTF-8, else Latin-1, written
    back as UTF-8) replays with the bytes it always replayed."""
    async with scripted(answering(OBS_TEXT)) as (_, origin):
        settings = gateway_settings(origin)
        client = await make_gateway(settings=settings)
        await exchange(client.port, REQUEST % b"old-1")
        rkey = hashed_record_key(settings.redis.key_prefix, "api", tenant_id([""]), digest("old-1"))
        redis = Redis.from_url(redis_url)
        old = {
            "st": 201, "h": [["X-Name", "caf\u00e9"], ["X-Euro", "\u20ac"]], "n": 2,
            "d": hashlib.sha256(b"ok").hexdigest(), "blob": None, "at": 0.0, "u": False,
            "x": {}, "r": "Cr\u00e9\u00e9",
        }  # fmt: skip
        try:
            assert await redis.hset(rkey, "m", orjson.dumps(old)) == 0  # it was there
        finally:
            await redis.aclose()
        replay = await exchange(client.port, REQUEST % b"old-1")
    lines = head_lines(replay)
    assert lines[0] == b"HTTP/1.1 201 Cr\xc3\xa9\xc3\xa9"
    assert lines[1:3] == [b"X-Name: caf\xc3\xa9", b"X-Euro: \xe2\x82\xac"]
    assert replay.endswith(b"\r\n\r\nok")


def test_a_head_written_as_bytes_refuses_line_breaks_in_any_line() -> None:
    assert head_bytes("HTTP/1.1 200 Tr\xe8s", [("X-A", "caf\xe9")]) == (
        b"HTTP/1.1 200 Tr\xe8s\r\nX-A: caf\xe9\r\n\r\n"
    )
    for headers in ([("X-A", "a\r\nX-Injected: 1")], [("X-A\n", "1")], [("X-A", "\x00")]):
        with pytest.raises(ValueError):
            head_bytes("HTTP/1.1 200 OK", headers)


# Control bytes no client may be sent (HTAB is allowed), which the upstream parser lets
# through: in a value, in a value beside obs-text, and in the reason phrase.
UNWRITABLE = {
    "value": b"HTTP/1.1 201 Created\r\nX-A: a\x01b\r\nContent-Length: 2\r\n\r\nok",
    "obs-text-value": b"HTTP/1.1 201 Created\r\nX-A: caf\xe9\x0bb\r\nContent-Length: 2\r\n\r\nok",
    "delete": b"HTTP/1.1 201 Created\r\nX-A: a\x7fb\r\nContent-Length: 2\r\n\r\nok",
    "reason": b"HTTP/1.1 201 Cre\x01ated\r\nContent-Length: 2\r\n\r\nok",
}


@pytest.mark.parametrize("name", list(UNWRITABLE))
async def test_a_head_with_a_control_byte_is_a_broken_upstream_not_a_500_on_every_replay(
    name: str, make_gateway: GatewayFactory, redis_url: str
) -> None:
    """Such a head cannot be written to a client: it is a malformed answer (502, as for
    a NUL), nothing is recorded, and neither the first answer nor a retry is a 500."""
    async with scripted(answering(UNWRITABLE[name])) as (upstream, origin):
        client = await make_gateway(settings=gateway_settings(origin))
        replies = [await exchange(client.port, REQUEST % b"ctl-1") for _ in range(2)]
        passed = await exchange(client.port, PASSED)
    for reply in (*replies, passed):
        assert head_lines(reply)[0] == b"HTTP/1.1 502 Bad Gateway"
        assert b'"code":"upstream-broken"' in reply
    assert b"Idempotent-Replayed" not in replies[1]
    assert len(upstream.requests) == 3  # released, as any broken answer by default


async def test_a_record_holding_a_control_byte_replays_as_corrupt_not_as_a_500(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    """Records written before such heads were refused may still hold one: each replay is
    the documented 502 record-corrupt, not a 500 with a traceback."""
    async with scripted(answering(OBS_TEXT)) as (upstream, origin):
        settings = gateway_settings(origin)
        client = await make_gateway(settings=settings)
        await exchange(client.port, REQUEST % b"old-ctl")
        rkey = hashed_record_key(
            settings.redis.key_prefix, "api", tenant_id([""]), digest("old-ctl")
        )
        redis = Redis.from_url(redis_url)
        old = {
            "st": 201, "h": [["X-A", "a\x01b"]], "n": 2, "d": hashlib.sha256(b"ok").hexdigest(),
            "blob": None, "at": 0.0, "u": False, "x": {}, "r": "Created", "hb": 1,
        }  # fmt: skip
        try:
            assert await redis.hset(rkey, "m", orjson.dumps(old)) == 0
        finally:
            await redis.aclose()
        replay = await exchange(client.port, REQUEST % b"old-ctl")
    assert head_lines(replay)[0] == b"HTTP/1.1 502 Bad Gateway"
    assert b'"code":"record-corrupt"' in replay
    assert len(upstream.requests) == 1


async def test_a_gzip_transfer_coding_reaches_the_client_and_its_replay_as_the_content(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    """A transfer coding is the upstream's hop, not the client's: the first answer and its
    replay carry the content, with no coding left that no header names."""
    content = b'{"order": 1001}' * 40
    coded = gzip.compress(content)
    answer = (
        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(coded), coded)
    )
    async with scripted(answering(answer)) as (upstream, origin):
        client = await make_gateway(settings=gateway_settings(origin))
        first = await exchange(client.port, REQUEST % b"te-1")
        replay = await exchange(client.port, REQUEST % b"te-1")
    assert len(upstream.requests) == 1
    for reply in (first, replay):
        head, body = reply.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 201 Created")
        assert b"gzip" not in head.lower()
        if b"transfer-encoding: chunked" in head.lower():  # the first answer streams
            body = _dechunked(body)
        assert body == content
    assert b"Idempotent-Replayed: true" in replay


def _dechunked(body: bytes) -> bytes:
    content = b""
    while True:
        size, _, body = body.partition(b"\r\n")
        if not int(size, 16):
            return content
        content, body = content + body[: int(size, 16)], body[int(size, 16) + 2 :]
