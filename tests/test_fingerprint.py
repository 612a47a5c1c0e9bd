"""Fingerprints: what counts as 'the same request payload'."""

from __future__ import annotations

from gateway.config.policy import Fingerprint
from gateway.core.fingerprint import fingerprint


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
