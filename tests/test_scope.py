"""The tenant scope comes from exactly the headers the upstream receives: raw-socket attacks
that would record an answer under one tenant and hand it to another are refused, and a route
may require a scope instead of using the shared anonymous one."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from testkit.polling import until

from .faultkit import redis_keys
from .gateways import GatewayFactory
from .rawhttp import exchange, status_of
from .upstream import CountingUpstream

HEAD = b"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Length: 1\r\n"


def request(*headers: bytes) -> bytes:
    return HEAD + b"".join(h + b"\r\n" for h in headers) + b"\r\nx"


def problem_type(reply: bytes) -> str:
    body = reply.split(b"\r\n\r\n", 1)[1]
    return str(orjson.loads(body)["type"]).rsplit(":", 1)[1]


ATTACKS = {
    "connection strips the tenant": (
        ["X-Tenant-Id"],
        [b"Idempotency-Key: k", b"X-Tenant-Id: tenant-A", b"Connection: close, X-Tenant-Id"],
        "hop-by-hop-scope-header",
    ),
    "connection strips authorization": (
        ["Authorization"],
        [b"Idempotency-Key: k", b"Authorization: Bearer a", b"Connection: Authorization"],
        "hop-by-hop-scope-header",
    ),
    "connection strips the key": (
        ["X-Tenant-Id"],
        [b"Idempotency-Key: k", b"X-Tenant-Id: tenant-A", b"Connection: idempotency-key"],
        "hop-by-hop-scope-header",
    ),
    "two tenants, A first": (
        ["X-Tenant-Id"],
        [b"Idempotency-Key: k", b"X-Tenant-Id: tenant-A", b"X-Tenant-Id: tenant-B"],
        "repeated-scope-header",
    ),
    "two tenants, B first": (
        ["X-Tenant-Id"],
        [b"Idempotency-Key: k", b"X-Tenant-Id: tenant-B", b"x-tenant-id: tenant-A"],
        "repeated-scope-header",
    ),
    "two authorizations": (
        ["Authorization"],
        [b"Idempotency-Key: k", b"Authorization: Bearer a", b"Authorization: Bearer b"],
        "repeated-scope-header",
    ),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
async def test_a_scope_the_upstream_would_not_see_is_refused(
    name: str,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
) -> None:
    counting, _ = upstream
    scope, headers, expected = ATTACKS[name]
    client = await make_gateway(scope=scope)
    reply = await exchange(client.port, request(*headers))
    assert status_of(reply) == 400
    assert problem_type(reply) == expected
    assert counting.count("/pay") == 0
    assert redis_keys(redis_url) == []


async def test_a_refused_split_leaves_the_tenant_its_own_answer(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str]
) -> None:
    counting, _ = upstream
    client = await make_gateway(scope=["X-Tenant-Id"])
    hostile = [b"Idempotency-Key: k", b"X-Tenant-Id: tenant-A", b"Connection: X-Tenant-Id"]
    assert status_of(await exchange(client.port, request(*hostile))) == 400
    plain = await exchange(client.port, request(b"Idempotency-Key: k", b"X-Tenant-Id: tenant-A"))
    assert status_of(plain) == 201
    assert b"Idempotent-Replayed" not in plain
    assert counting.count("/pay", "k") == 1


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([b"Idempotency-Key: k"], 400),
        ([b"Idempotency-Key: k", b"X-Tenant-Id: "], 400),
        ([b"Idempotency-Key: k", b"X-Tenant-Id: t"], 201),
    ],
)
async def test_require_scope_refuses_the_anonymous_scope(
    headers: list[bytes],
    status: int,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
) -> None:
    counting, _ = upstream
    client = await make_gateway(scope=["X-Tenant-Id"], require_scope=True)
    reply = await exchange(client.port, request(*headers))
    assert status_of(reply) == status
    if status == 400:
        assert problem_type(reply) == "missing-scope"
        assert counting.count("/pay") == 0
        assert redis_keys(redis_url) == []


async def test_without_require_scope_the_anonymous_scope_is_shared(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str]
) -> None:
    counting, _ = upstream
    client = await make_gateway(scope=["X-Tenant-Id"])
    first = await exchange(client.port, request(b"Idempotency-Key: k"))
    again = await exchange(client.port, request(b"Idempotency-Key: k", b"X-Tenant-Id: "))
    assert status_of(first) == status_of(again) == 201
    assert b"Idempotent-Replayed: true" in again
    assert counting.count("/pay", "k") == 1


@pytest.mark.parametrize("key", [b"", b"Idempotency-Key: k\r\n"])
async def test_a_client_hanging_up_mid_body_is_logged_as_499_without_a_traceback(
    key: bytes,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    counting, _ = upstream
    caplog.set_level(logging.DEBUG)
    client = await make_gateway()
    _, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(
        b"POST /pay HTTP/1.1\r\nHost: gw\r\n" + key + b"Content-Length: 100\r\n\r\nonly 10 b"
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()

    def logged() -> list[dict[str, object]]:
        return [r.fields for r in caplog.records if r.name == "gateway.http.server.access"]  # type: ignore[attr-defined]

    await until(logged, 10, "an access log line", every=0.01)
    assert [line["status"] for line in logged()] == [499]
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
    assert counting.count("/pay") == 0


async def test_an_http_1_0_chunked_request_closes_its_connection(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str]
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    smuggled = (
        b"POST /pay HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: second\r\nContent-Length: 1\r\n\r\nx"
    )
    reply = await exchange(
        client.port,
        b"POST /pay HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\nIdempotency-Key: first\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n" + smuggled,
    )
    assert reply.count(b"HTTP/1.") == 1  # one answer, then the connection was closed
    assert counting.count("/pay", "second") == 0
