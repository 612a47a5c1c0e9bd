"""Hostile bytes from outside, each found to break "a replay is the upstream's answer, for
that key and no other": raw-socket clients and byte-exact upstreams on loopback."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from .differences import differences, request
from .gateways import GatewayFactory, gateway_settings
from .hostile import Wire, start_gateway
from .rawhttp import Entry, corpus_upstream, exchange, parse, status_of
from .scripted import answering, scripted

ANSWER = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"


def keyed(key: bytes) -> bytes:
    return (
        b"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nIdempotency-Key: " + key
        + b"\r\nContent-Length: 1\r\n\r\nx"
    )  # fmt: skip


@pytest.mark.parametrize("key", [b"\xc2\xa0abc", b"abc\xc2\xa0", b"abc\xe3\x80\x80"])
async def test_a_key_in_unicode_white_space_is_refused_not_replayed_another_keys_answer(
    key: bytes, make_gateway: GatewayFactory
) -> None:
    async with scripted(answering(ANSWER)) as (upstream, origin):
        gateway = await make_gateway(settings=gateway_settings(origin))
        assert status_of(await exchange(gateway.port, keyed(b"abc"))) == 201
        reply = await exchange(gateway.port, keyed(key))
    assert status_of(reply) == 400
    assert b"Idempotent-Replayed" not in reply
    assert len(upstream.requests) == 1


def _ok(head: str) -> bytes:
    return f"HTTP/1.1 {head}\r\nContent-Length: 2\r\n\r\nok".encode("latin-1")


# Heads within the limits both upstream clients share (docs/fidelity.md) but past aiohttp's
# own defaults (8190 bytes a line, 128 lines): a pass-through failed them with 502 while the
# keyed first answer recorded them.
WITHIN = {
    "many-headers": _ok("200 OK\r\n" + "\r\n".join(f"X-H{i}: v{i}" for i in range(900))),
    "long-value": _ok("200 OK\r\nX-Long: " + "v" * 60_000),
    "long-reason": _ok("200 " + "r" * 60_000),
    "long-name": _ok("200 OK\r\nX-" + "n" * 60_000 + ": 1"),
}
# Past them: a malformed answer for both clients alike, nothing recorded.
PAST = {
    "too-many-headers": _ok("200 OK\r\n" + "\r\n".join(f"X-H{i}: v" for i in range(1001))),
    "too-long-value": _ok("200 OK\r\nX-Long: " + "v" * (1 << 20)),
    "too-long-reason": _ok("200 " + "r" * ((1 << 20) + 1)),
    "too-long-head": _ok("200 OK\r\n" + "\r\n".join(f"X-H{i}: {'v' * 2000}" for i in range(600))),
}


def corpus_request(name: str, key: str | None) -> bytes:
    return request(Entry(name, b""), key)


@pytest.mark.parametrize("name", list(WITHIN))
async def test_a_large_head_within_the_limits_passes_every_way_alike(
    name: str, make_gateway: GatewayFactory
) -> None:
    async with corpus_upstream([Entry(name, WITHIN[name])]) as (upstream, port):
        gateway = await make_gateway(settings=gateway_settings(f"http://127.0.0.1:{port}"))
        direct = parse(await exchange(port, corpus_request(name, None)))
        answers = {
            "first (httptools client)": await exchange(gateway.port, corpus_request(name, "L1")),
            "replay": await exchange(gateway.port, corpus_request(name, "L1")),
            "pass-through (aiohttp)": await exchange(gateway.port, corpus_request(name, None)),
        }
    found = {way: d for way, raw in answers.items() if (d := differences(direct, parse(raw)))}
    assert not found, {way: d[:3] for way, d in found.items()}
    assert upstream.calls[name] == 3


@pytest.mark.parametrize("name", list(PAST))
async def test_a_head_past_the_limits_is_malformed_for_both_clients(
    name: str, make_gateway: GatewayFactory
) -> None:
    async with corpus_upstream([Entry(name, PAST[name])]) as (upstream, port):
        gateway = await make_gateway(settings=gateway_settings(f"http://127.0.0.1:{port}"))
        replies = [
            await exchange(gateway.port, corpus_request(name, "P1")),  # the httptools client
            await exchange(gateway.port, corpus_request(name, "P1")),  # nothing recorded
            await exchange(gateway.port, corpus_request(name, None)),  # aiohttp's
        ]
    assert [status_of(reply) for reply in replies] == [502, 502, 502]
    assert all(b"upstream-broken" in reply for reply in replies)
    assert upstream.calls[name] == 3


@pytest.mark.parametrize(
    "coding", [b"compress", b"chunked, identity", b"gzip, deflate", b"br, chunked"]
)
async def test_a_coding_the_gateway_cannot_undo_is_a_502_with_a_key_or_without(
    coding: bytes, make_gateway: GatewayFactory
) -> None:
    # A pass-through closed the connection without a word; the keyed request got its 502.
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding + b"\r\n\r\ncoded bytes"
    if coding.endswith(b"chunked"):
        raw = raw.replace(b"coded bytes", b"5\r\ncoded\r\n0\r\n\r\n")
    entry = Entry("coded", raw, close=True)
    async with corpus_upstream([entry]) as (upstream, port):
        gateway = await make_gateway(settings=gateway_settings(f"http://127.0.0.1:{port}"))
        keyed = await exchange(gateway.port, corpus_request("coded", "C1"))
        passed = await exchange(gateway.port, corpus_request("coded", None))
    for reply in (keyed, passed):
        assert status_of(reply) == 502, reply[:80]
        assert b"upstream-broken" in reply
        assert b"coded" not in reply.split(b"\r\n\r\n", 1)[1]
    assert upstream.calls["coded"] == 2


PIPELINED = {
    "plain": b"HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
    "obs-text": b"HTTP/1.1 201 Tr\xe8s bien\r\nX-Name: caf\xe9\r\nContent-Length: 2\r\n\r\nok",
    "cookies": b"HTTP/1.1 200 OK\r\nSet-Cookie: a\r\nset-cookie: b\r\ncontent-length: 1\r\n\r\n!",
    "empty": b"HTTP/1.1 200 \r\nX-Empty:\r\nX-Tab: a\tb\r\nContent-Length: 0\r\n\r\n",
}
_PER_ANSWER = (b"date:", b"idempotency-expires:", b"idempotent-replayed:", b"connection:")


def _same_parts(answer: bytes) -> bytes:
    """An answer without the lines that differ per answer by design (docs/fidelity.md)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(_PER_ANSWER)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def _answers(reader: asyncio.StreamReader, count: int) -> list[bytes]:
    out = []
    async with asyncio.timeout(10):
        for _ in range(count):
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)\r$", head)
            assert length is not None, head
            out.append(head + await reader.readexactly(int(length.group(1))))
    return out


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_pipelined_replays_on_one_connection_are_the_first_answer(
    loop: str, redis_url: str, tmp_path: Path, wire: Wire
) -> None:
    """Replays pipelined on one kept-alive connection, an HTTP/1.0 one among them, each the
    first answer, under both loops of a gateway process;
    in a tenant's scope, so that its cookies are replayed too."""
    entries = [Entry(name, raw) for name, raw in PIPELINED.items()]
    async with corpus_upstream(entries) as (upstream, port):
        origin = f"http://127.0.0.1:{port}"
        gateway = start_gateway(origin, redis_url, tmp_path, {}, loop=loop, wire=wire)
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", gateway.port, ssl=wire.client,
                server_hostname="127.0.0.1" if wire.client else None,
            )  # fmt: skip
            for name in PIPELINED:
                sent = _keep_alive(name, "1.1")
                writer.write(sent)
                (first,) = await _answers(reader, 1)
                writer.write(sent + _keep_alive(name, "1.0") + sent)
                replays = await _answers(reader, 3)
                assert [_same_parts(r) for r in replays[::2]] == [_same_parts(first)] * 2
                assert replays[1].startswith(b"HTTP/1.0 ")
                assert _same_parts(replays[1])[8:] == _same_parts(first)[8:]
                assert all(b"Idempotent-Replayed: true" in r for r in replays)
            writer.close()
        finally:
            gateway.stop()
    assert all(upstream.calls[name] == 1 for name in PIPELINED)


def _keep_alive(name: str, version: str) -> bytes:
    return (
        f"POST /c/{name} HTTP/{version}\r\nHost: gw\r\nConnection: keep-alive\r\n"
        f"Idempotency-Key: pipe-{name}\r\nX-Request-Id: same-id\r\nAuthorization: Bearer t\r\n"
        "Content-Length: 1\r\n\r\nx"
    ).encode()
