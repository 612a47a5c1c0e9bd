"""Problem details (RFC 9457): a distinct type and a stable code per reason, and no internal
class name, address or traceback in any body."""

from __future__ import annotations

import socket

import orjson
import pytest

from .conftest import GatewayFactory, gateway_settings
from .upstream import CountingUpstream


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when this returns


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"Idempotency-Key": ""}, "empty-key"),
        ({"Idempotency-Key": "k" * 256}, "key-too-long"),
        ({"Idempotency-Key": '"unterminated'}, "malformed-key"),
        ([("Idempotency-Key", "a"), ("Idempotency-Key", "b")], "several-keys"),
    ],
)
async def test_each_bad_key_has_its_own_type(
    headers: dict[str, str] | list[tuple[str, str]],
    code: str,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    resp = await client.post("/pay", data=b"x", headers=headers)
    assert resp.status == 400
    assert resp.content_type == "application/problem+json"
    body = orjson.loads(await resp.read())
    assert body["code"] == code
    assert body["type"] == f"urn:idem-gateway:problem:{code}"
    assert counting.count("/pay") == 0


@pytest.mark.parametrize("key", [None, "k"])  # pass-through and claimed
async def test_an_unreachable_upstream_is_named_by_type_not_by_address(
    key: str | None, make_gateway: GatewayFactory
) -> None:
    port = closed_port()
    client = await make_gateway(settings=gateway_settings(f"http://127.0.0.1:{port}"))
    headers = {"Idempotency-Key": key} if key else {}
    resp = await client.post("/pay", data=b"x", headers=headers)
    assert resp.status == 502
    raw = await resp.read()
    body = orjson.loads(raw)
    assert body["code"] == "upstream-unreachable"
    internals = (b"127.0.0.1", str(port).encode(), b"UpstreamUnsent", b"Connect", b"Traceback")
    for internal in internals:
        assert internal not in raw
