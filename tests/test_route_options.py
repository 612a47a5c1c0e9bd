"""Per-route options of the replay and of the key: the marker's names, cookies and credentials
in replays, the client's Host, a cap on replayed bodies, key aliases and a key in the JSON
body, and the fail-open marker. Raw sockets on both sides."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from testkit.ports import Port

from .gateways import GatewayFactory, gateway_settings
from .rawhttp import exchange, status_of
from .scripted import answering, scripted

CREDENTIALED = (
    b"HTTP/1.1 201 Created\r\nSet-Cookie: session=s1\r\nWWW-Authenticate: Bearer\r\n"
    b"Authorization: Bearer minted\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok"
)
CREDENTIAL_LINES = (b"set-cookie:", b"www-authenticate:", b"authorization:")


def post(key: str | None, *extra: str, body: bytes = b"x", host: str = "gw") -> bytes:
    lines = ["POST /pay HTTP/1.1", f"Host: {host}", "Connection: close", *extra]
    if key is not None:
        lines.append(f"Idempotency-Key: {key}")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def head_of(reply: bytes) -> list[bytes]:
    return reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n")


def credentials_in(reply: bytes) -> list[bytes]:
    return [line for line in head_of(reply) if line.lower().startswith(CREDENTIAL_LINES)]


def problem_code(reply: bytes) -> str:
    body = reply.split(b"\r\n\r\n", 1)[1]
    code: str = orjson.loads(body)["code"]
    return code


async def test_the_replay_marker_may_carry_both_spellings(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    answer = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    async with scripted(answering(answer)) as (upstream, origin):
        both = ["Idempotent-Replayed", "Idempotency-Replayed"]
        client = await make_gateway(settings=gateway_settings(origin, replay_header=both))
        first = await exchange(client.port, post("m1"))
        replay = await exchange(client.port, post("m1"))
    assert len(upstream.requests) == 1
    assert b"Replayed" not in first
    head = head_of(replay)
    assert b"Idempotent-Replayed: true" in head and b"Idempotency-Replayed: true" in head


@pytest.mark.parametrize(
    ("options", "scoped_replay", "anonymous_replay"),
    [
        ({}, True, False),  # the default: within a scope only
        ({"replay_set_cookie": "strip", "replay_credentials": "strip"}, False, False),
        ({"replay_set_cookie": "keep", "replay_credentials": "keep"}, True, True),
    ],
)
async def test_cookies_and_credentials_are_replayed_as_the_route_says(
    options: dict[str, Any],
    scoped_replay: bool,
    anonymous_replay: bool,
    make_gateway: GatewayFactory,
    redis_url: str,
) -> None:
    async with scripted(answering(CREDENTIALED)) as (upstream, origin):
        client = await make_gateway(settings=gateway_settings(origin, **options))
        scoped = [await exchange(client.port, post("c1", "Authorization: Bearer t1"))]
        scoped.append(await exchange(client.port, post("c1", "Authorization: Bearer t1")))
        anonymous = [await exchange(client.port, post("c1")) for _ in range(2)]
    assert len(upstream.requests) == 2  # one per scope
    everything = [b"Set-Cookie: session=s1", b"WWW-Authenticate: Bearer"]
    everything.append(b"Authorization: Bearer minted")
    for first in (scoped[0], anonymous[0]):  # the first answer always carries them
        assert credentials_in(first) == everything
    assert credentials_in(scoped[1]) == (everything if scoped_replay else [])
    assert credentials_in(anonymous[1]) == (everything if anonymous_replay else [])
    for replay in (scoped[1], anonymous[1]):
        assert b"Idempotent-Replayed: true" in replay and b"X-Kept: 1" in replay


@pytest.mark.parametrize("preserve", [False, True])
async def test_preserve_host_sends_the_clients_host(
    preserve: bool, make_gateway: GatewayFactory, redis_url: str
) -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    async with scripted(answering(answer)) as (upstream, origin):
        client = await make_gateway(settings=gateway_settings(origin, preserve_host=preserve))
        await exchange(client.port, post("h1", host="api.example"))  # the httptools client
        await exchange(client.port, post(None, host="api.example"))  # streamed: aiohttp's
    authority = origin.removeprefix("http://").encode()
    expected = b"api.example" if preserve else authority
    for head, _ in upstream.requests:
        hosts = [line for line in head.split(b"\r\n") if line.lower().startswith(b"host:")]
        assert hosts == [b"Host: " + expected]


async def test_answers_over_max_replay_body_replay_their_head_only(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    big = b"HTTP/1.1 201 Made\r\nX-A: 1\r\nContent-Length: 100\r\n\r\n" + b"b" * 100
    small = b"HTTP/1.1 201 Made\r\nX-A: 1\r\nContent-Length: 5\r\n\r\nsmall"

    async def respond(n: int, writer: Any) -> bool:
        writer.write(big if b"/big" in upstream.requests[-1][0] else small)
        await writer.drain()
        return True

    async with scripted(respond) as (upstream, origin):
        client = await make_gateway(settings=gateway_settings(origin, max_replay_body=10))
        request = post("r1", "Authorization: Bearer t").replace(b"/pay", b"/big")
        first = await exchange(client.port, request)
        replay = await exchange(client.port, request)
        small_first = await exchange(client.port, post("r2"))
        small_replay = await exchange(client.port, post("r2"))
    assert len(upstream.requests) == 2
    assert first.endswith(b"\r\n\r\n" + b"b" * 100)  # the first client gets all of it
    head = head_of(replay)
    assert head[0] == b"HTTP/1.1 201 Made" and b"X-A: 1" in head
    assert b"Content-Length: 0" in head and b"Idempotency-Replay: omitted" in head
    assert b"Idempotent-Replayed: true" in head
    assert replay.endswith(b"\r\n\r\n")
    assert small_first.endswith(b"small") and small_replay.endswith(b"small")
    assert b"Idempotency-Replay" not in small_replay


async def test_a_key_alias_header_is_a_key(make_gateway: GatewayFactory, redis_url: str) -> None:
    answer = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    aliases = ["X-Idempotency-Key", "PayPal-Request-Id"]
    async with scripted(answering(answer)) as (upstream, origin):
        client = await make_gateway(settings=gateway_settings(origin, key_headers=aliases))
        await exchange(client.port, post(None, "X-Idempotency-Key: a1"))
        by_alias = await exchange(client.port, post(None, "PayPal-Request-Id: a1"))
        by_name = await exchange(client.port, post("a1"))  # key_header still works
        agreeing = await exchange(client.port, post("a1", "X-Idempotency-Key: a1"))
        conflicting = await exchange(client.port, post("a1", "PayPal-Request-Id: a2"))
    assert len(upstream.requests) == 1
    for reply in (by_alias, by_name, agreeing):
        assert b"Idempotent-Replayed: true" in reply
    assert status_of(conflicting) == 400
    assert problem_code(conflicting) == "conflicting-keys"


async def test_a_key_may_come_from_a_json_body_member(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    answer = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    async with scripted(answering(answer)) as (upstream, origin):
        settings = gateway_settings(origin, key_json_pointer="/request_id")
        client = await make_gateway(settings=settings)
        body = b'{"request_id": "j1", "amount": 5}'
        first = await exchange(client.port, post(None, body=body))
        replay = await exchange(client.port, post(None, body=body))
        with_header = await exchange(client.port, post("j1", body=body))
        conflicting = await exchange(client.port, post("other", body=body))
        other_payload = await exchange(
            client.port, post(None, body=b'{"request_id": "j1", "amount": 6}')
        )
        not_a_string = await exchange(client.port, post(None, body=b'{"request_id": [1]}'))
        no_member = await exchange(client.port, post(None, body=b'{"amount": 5}'))
    assert status_of(first) == 201 and b"Replayed" not in first
    assert b"Idempotent-Replayed: true" in replay and b"Idempotent-Replayed: true" in with_header
    assert status_of(conflicting) == 400 and problem_code(conflicting) == "conflicting-keys"
    assert status_of(other_payload) == 422
    assert status_of(not_a_string) == 400 and problem_code(not_a_string) == "malformed-key"
    assert status_of(no_member) == 201  # no key: proxied without idempotency
    assert len(upstream.requests) == 2  # j1 once, and the request without a key


async def test_a_body_key_is_found_beside_a_lone_surrogate_escape(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    """A JavaScript client that cut an emoji in half sends `"\\ud83d"` in some field: valid
    JSON text that orjson refuses. The key beside it still protects the request (it was
    taken as absent, and every retry ran again)."""
    answer = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    async with scripted(answering(answer)) as (upstream, origin):
        settings = gateway_settings(origin, key_json_pointer="/request_id")
        client = await make_gateway(settings=settings)
        body = b'{"request_id": "j2", "note": "thanks \\ud83d"}'
        replies = [await exchange(client.port, post(None, body=body)) for _ in range(2)]
    assert [status_of(reply) for reply in replies] == [201, 201]
    assert b"Idempotent-Replayed: true" in replies[1]
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("name", [None, "X-Protection-Skipped"])
async def test_fail_open_answers_are_marked_degraded(
    name: str | None, make_gateway: GatewayFactory, refused_port: Port
) -> None:
    answer = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    options: dict[str, Any] = {"fail_mode": "open"}
    if name is not None:
        options["degraded_header"] = name
    async with scripted(answering(answer)) as (upstream, origin):
        client = await make_gateway(
            settings=gateway_settings(origin, **options),
            url=f"redis://127.0.0.1:{refused_port.number}/0",
        )
        reply = await exchange(client.port, post("d1"))
    assert status_of(reply) == 201 and len(upstream.requests) == 1
    assert f"{name or 'Idempotency-Degraded'}: true".encode() in head_of(reply)
    assert b"Idempotency-Bypassed" not in reply
