"""Fingerprints: what counts as 'the same request payload'."""

from __future__ import annotations

import gzip

import pytest
import redis

from gateway.config.loading import settings_from_dict
from gateway.config.policy import Fingerprint
from gateway.core.fingerprint import earlier_fingerprint, fingerprint
from gateway.errors import ConfigError

from .gateways import GatewayFactory, gateway_settings
from .rawhttp import exchange, status_of
from .scripted import answering, scripted
from .upstream import CountingUpstream


def fp(spec: Fingerprint, body: bytes, method: str = "POST", path: str = "/p", query: str = "",
       headers: dict[str, tuple[str, ...]] | None = None) -> str:  # fmt: skip
    return fingerprint(spec, method, path, query, headers or {}, body)


def test_body_mode_sees_every_part() -> None:
    spec = Fingerprint()
    base = fp(spec, b"a")
    assert fp(spec, b"a") == base
    assert fp(spec, b"b") != base
    assert fp(spec, b"a", method="PUT") != base
    assert fp(spec, b"a", path="/q") != base
    assert fp(spec, b"a", query="x=1") != base


def test_json_mode_ignores_key_order_space_and_listed_pointers() -> None:
    spec = Fingerprint(mode="json", ignore=("/client_ts", "/meta/nonce"))
    a = fp(spec, b'{"amount": 1, "currency": "EUR", "client_ts": 1, "meta": {"nonce": 5}}')
    b = fp(spec, b'{"meta":{"nonce":9},"currency":"EUR","client_ts":2,"amount":1}')
    assert a == b
    assert fp(spec, b'{"amount": 2, "currency": "EUR"}') != a


def test_json_mode_counts_a_non_json_body_as_bytes() -> None:
    spec = Fingerprint(mode="json")
    assert fp(spec, b"not json") == fp(spec, b"not json")
    assert fp(spec, b"not json") != fp(spec, b"not json!")


def test_configured_headers_count() -> None:
    spec = Fingerprint(headers=("X-Account",))
    one, two = {"X-Account": ("1",)}, {"X-Account": ("2",)}
    assert fp(spec, b"a", headers=one) != fp(spec, b"a", headers=two)


def test_every_value_of_a_configured_header_counts_and_absent_is_not_empty() -> None:
    """The upstream receives every value of a repeated header: `test` then `live` is not
    `test` alone, nor `live, test`; and a header sent empty is not a header left out."""
    spec = Fingerprint(headers=("X-Mode",))
    seen = {
        fp(spec, b"a", headers=values)
        for values in (
            {"X-Mode": ("test", "live")},
            {"X-Mode": ("test",)},
            {"X-Mode": ("live", "test")},
            {"X-Mode": ("",)},
            {"X-Mode": ()},
        )
    }
    assert len(seen) == 5


def test_none_mode_accepts_any_payload() -> None:
    spec = Fingerprint(mode="none")
    assert fp(spec, b"a") == fp(spec, b"b", method="PUT")


def test_json_mode_tells_apart_numbers_a_double_would_merge() -> None:
    """An upstream that reads amounts as decimals sees two payloads where a double sees one."""
    spec = Fingerprint(mode="json")
    pairs = [
        (b'{"amount": 0.3}', b'{"amount": 0.30000000000000001}'),
        (b'{"amount": 0.0}', b'{"amount": 1e-400}'),
        (b'{"amount": 9007199254740992.0}', b'{"amount": 9007199254740993.0}'),
        (b'{"id": 12345678901234567890}', b'{"id": 12345678901234567891}'),
    ]
    for one, other in pairs:
        assert fp(spec, one) != fp(spec, other), (one, other)
    assert fp(spec, b'{"a": 0.3, "b": [1, 2]}') == fp(spec, b'{ "b":[1,2], "a":0.3 }')


def test_json_mode_counts_a_member_named_twice_as_bytes() -> None:
    """Parsers differ on which of two members of one name counts: such a body is compared
    as it was sent, never as the object one parser would make of it."""
    spec = Fingerprint(mode="json")
    twice = b'{"amount": 1, "amount": 5000}'
    assert fp(spec, twice) != fp(spec, b'{"amount": 5000}')
    assert fp(spec, twice) != fp(spec, b'{"amount": 1}')
    assert fp(spec, twice) == fp(spec, twice)


def test_json_mode_reads_strings_by_their_text_and_refuses_what_is_not_json() -> None:
    spec = Fingerprint(mode="json")
    assert fp(spec, b'{"name": "\\u00e9"}') == fp(spec, '{"name": "\u00e9"}'.encode())
    assert fp(spec, b'{"x": NaN}') != fp(spec, b'{"x":NaN}')  # not JSON: bytes


def test_json_mode_reads_a_document_nested_too_deep_as_bytes() -> None:
    """Past the parser's depth the body is fingerprinted as its bytes, as a body that is not
    JSON is: white space then counts, where in a document it reads it would not."""
    spec = Fingerprint(mode="json")
    deep, spaced = b"[" * 100_000 + b"]" * 100_000, b"[ " * 100_000 + b"]" * 100_000
    assert fp(spec, deep) != fp(spec, spaced)
    assert fp(spec, deep) == fp(spec, deep)  # and is no error
    shallow, shallow_spaced = b"[" * 50 + b"]" * 50, b"[ " * 50 + b"]" * 50
    assert fp(spec, shallow) == fp(spec, shallow_spaced)


async def test_a_record_an_earlier_version_stored_in_json_mode_still_answers_its_retries(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """Records stored before numbers were compared as written carry the fingerprint of that
    time: a retry of the same request replays them (not 422) while they are kept, and a
    payload both versions tell apart still gets 422."""
    counting, _ = upstream
    client = await make_gateway(fingerprint={"mode": "json"})
    key = {"Idempotency-Key": "k-earlier", "Content-Type": "application/json"}
    body = b'{"amount": 12.50, "currency": "EUR"}'
    first = await client.post("/pay", data=body, headers=key)
    assert first.status == 201
    spec = Fingerprint(mode="json")
    earlier = earlier_fingerprint(spec, "POST", "/pay", "", {}, body)
    assert earlier is not None and earlier != fingerprint(spec, "POST", "/pay", "", {}, body)
    plain = redis.Redis.from_url(redis_url)
    try:
        [record] = plain.keys()
        plain.hset(record, "f", earlier)  # as the earlier version stored it
    finally:
        plain.close()
    replay = await client.post("/pay", data=body, headers=key)
    assert replay.status == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert await replay.read() == await first.read()
    other = await client.post("/pay", data=b'{"amount": 13, "currency": "EUR"}', headers=key)
    assert other.status == 422
    assert counting.count("/pay") == 1


ANSWER = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"


def keyed(key: bytes, extra: bytes) -> bytes:
    return (
        b"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nIdempotency-Key: " + key
        + b"\r\n" + extra + b"Content-Length: 2\r\n\r\n{}"
    )  # fmt: skip


def values_of(head: bytes, name: bytes) -> list[bytes]:
    lines = head.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]
    return [line.split(b":", 1)[1].strip() for line in lines if line.lower().startswith(name)]


async def test_a_repeated_fingerprint_header_counts_with_every_value_the_upstream_receives(
    make_gateway: GatewayFactory,
) -> None:
    async with scripted(answering(ANSWER)) as (upstream, origin):
        gateway = await make_gateway(
            settings=gateway_settings(origin, fingerprint={"headers": ["X-Mode"]})
        )
        first = await exchange(gateway.port, keyed(b"dup", b"X-Mode: test\r\nX-Mode: live\r\n"))
        one_value = await exchange(gateway.port, keyed(b"dup", b"X-Mode: test\r\n"))
        same = await exchange(gateway.port, keyed(b"dup", b"X-Mode: test\r\nX-Mode: live\r\n"))
    assert status_of(first) == 201
    assert values_of(upstream.requests[0][0], b"x-mode") == [b"test", b"live"]
    assert status_of(one_value) == 422  # another request to the upstream, not a retry
    assert status_of(same) == 201 and b"Idempotent-Replayed: true" in same
    assert len(upstream.requests) == 1


async def test_a_fingerprint_header_that_connection_names_counts_as_absent(
    make_gateway: GatewayFactory,
) -> None:
    """`Connection: X-Mode` keeps X-Mode from the upstream: the fingerprint counts what the
    upstream receives, so a later request that does send X-Mode is not its retry."""
    async with scripted(answering(ANSWER)) as (upstream, origin):
        gateway = await make_gateway(
            settings=gateway_settings(origin, fingerprint={"headers": ["X-Mode"]})
        )
        hop = b"X-Mode: live\r\nConnection: X-Mode\r\n"
        first = await exchange(gateway.port, keyed(b"hop", hop))
        sent = await exchange(gateway.port, keyed(b"hop", b"X-Mode: live\r\n"))
        absent = await exchange(gateway.port, keyed(b"hop", b""))
    assert status_of(first) == 201
    assert values_of(upstream.requests[0][0], b"x-mode") == []
    assert status_of(sent) == 422
    assert status_of(absent) == 201 and b"Idempotent-Replayed: true" in absent
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"deflate, chunked", b"x-foo, chunked"])
async def test_a_request_body_with_a_transfer_coding_besides_chunked_is_refused_with_501(
    make_gateway: GatewayFactory, coding: bytes
) -> None:
    """Only the chunking is undone: the coded bytes would reach the upstream as if they were
    the content, unlabelled, and be fingerprinted and recorded so. Keyed or not, 501."""
    coded = gzip.compress(b'{"amount": 100}')
    body = b"%x\r\n" % len(coded) + coded + b"\r\n0\r\n\r\n"
    head = b"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n"
    coded_as = b"Transfer-Encoding: " + coding + b"\r\n\r\n"
    async with scripted(answering(ANSWER)) as (upstream, origin):
        gateway = await make_gateway(settings=gateway_settings(origin))
        replies = [
            await exchange(gateway.port, head + key + coded_as + body)
            for key in (b"Idempotency-Key: te\r\n", b"")
        ]
    assert [status_of(reply) for reply in replies] == [501, 501]
    assert all(b'"code":"transfer-coding"' in reply for reply in replies)
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("first", "other"),
    [
        (b'{"amount": 0.3}', b'{"amount": 0.30000000000000001}'),
        (b'{"amount": 5000}', b'{"amount": 1, "amount": 5000}'),
        (b'{"amount": 100.0}', b'{"amount": 1e2}'),
    ],
)
async def test_the_earlier_reading_never_merges_a_payload_into_a_record_of_todays(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], first: bytes, other: bytes
) -> None:
    """The earlier json reading (through doubles, last member wins) would take `other` for
    `first`: asked only of records stored under it, it must never match a record stored
    today, whose canonical text can be the same bytes."""
    counting, _ = upstream
    client = await make_gateway(fingerprint={"mode": "json"})
    key = {"Idempotency-Key": "k-today", "Content-Type": "application/json"}
    assert (await client.post("/pay", data=first, headers=key)).status == 201
    assert (await client.post("/pay", data=other, headers=key)).status == 422
    assert counting.count("/pay") == 1


@pytest.mark.parametrize(
    "name", ["Keep-Alive", "Connection", "Proxy-Authorization", "X-Forwarded-For", "Expect"]
)
def test_a_fingerprint_header_the_upstream_never_receives_as_sent_is_refused(name: str) -> None:
    """Hop by hop, or rewritten by the gateway: its client values could only tell apart
    requests that reach the upstream alike."""
    route = {"name": "a", "path_prefix": "/", "upstream": "http://127.0.0.1:9"}
    with pytest.raises(ConfigError, match=f"fingerprint.headers: {name!r} does not reach"):
        settings_from_dict({"routes": [{**route, "fingerprint": {"headers": [name]}}]})
