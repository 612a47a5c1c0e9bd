"""Fingerprints: what counts as 'the same request payload'."""

from __future__ import annotations

import redis

from gateway.config.policy import Fingerprint
from gateway.core.fingerprint import earlier_fingerprint, fingerprint

from .conftest import GatewayFactory
from .upstream import CountingUpstream


def fp(spec: Fingerprint, body: bytes, method: str = "POST", path: str = "/p", query: str = "",
       headers: dict[str, str] | None = None) -> str:  # fmt: skip
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
    assert fp(spec, b"a", headers={"X-Account": "1"}) != fp(spec, b"a", headers={"X-Account": "2"})


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
    assert fp(spec, b"[" * 100_000) == fp(spec, b"[" * 100_000)  # too deep: bytes


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
