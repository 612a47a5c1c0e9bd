"""A replay is the upstream's answer: its reason phrase and headers as it sent them, and no
header the upstream did not send beyond the documented ones."""

from __future__ import annotations

import pytest

from .conftest import GatewayFactory, gateway_settings
from .scripted import answering, scripted
from .test_faults_input import exchange


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
