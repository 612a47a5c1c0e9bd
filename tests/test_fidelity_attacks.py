"""Hostile bytes from outside, each found to break "a replay is the upstream's answer, for
that key and no other": raw-socket clients and byte-exact upstreams on loopback."""

from __future__ import annotations

import pytest

from .conftest import GatewayFactory, gateway_settings
from .scripted import answering, scripted
from .test_faults_input import exchange, status_of

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
