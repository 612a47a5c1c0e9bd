"""Key parsing, tenant hashing and record naming."""

from __future__ import annotations

import pytest

from gateway.core.headers import replayed_headers
from gateway.core.keys import (
    BadKey,
    KeyProblem,
    agreed_key,
    digest,
    json_key,
    parse_key,
    prefix_and_route,
    record_key,
    record_names,
    route_of_name,
    tenant_id,
)
from gateway.core.scope import scope_values


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ([], None),
        (["abc"], "abc"),
        (['"abc"'], "abc"),
        (['"a\\"b"'], 'a"b'),
        (["abc", '"abc"'], "abc"),
        (["  padded  "], "padded"),
        (["x" * 255], "x" * 255),
    ],
)
def test_parse_key(values: list[str], key: str | None) -> None:
    assert parse_key(values) == key


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ([""], KeyProblem.EMPTY),
        (['""'], KeyProblem.EMPTY),
        (["x" * 256], KeyProblem.TOO_LONG),
        (['"' + "x" * 256 + '"'], KeyProblem.TOO_LONG),
        (["a b"], KeyProblem.MALFORMED),
        (["ctl\x01"], KeyProblem.MALFORMED),
        (['"ctl\x01"'], KeyProblem.MALFORMED),
        (["é"], KeyProblem.MALFORMED),
        (['"open'], KeyProblem.MALFORMED),
        (['"a"b'], KeyProblem.MALFORMED),
        (['"k";X=1'], KeyProblem.MALFORMED),  # parameter names are lower case
        (["a", "b"], KeyProblem.SEVERAL),
    ],
)
def test_parse_key_rejects(values: list[str], problem: KeyProblem) -> None:
    with pytest.raises(BadKey) as raised:
        parse_key(values)
    assert raised.value.problem is problem


def test_a_bare_key_is_every_visible_ascii_character_and_nothing_else() -> None:
    visible = "".join(chr(c) for c in range(0x21, 0x7F))
    assert parse_key([visible.replace('"', "") + '"']) == visible.replace('"', "") + '"'
    for char in ("\x00", "\t", "\x1f", "\x7f", "\x80", "\xa0", "\xe9", "\u20ac", "\U0001f600"):
        with pytest.raises(BadKey) as raised:
            parse_key([f"a{char}b"])
        assert raised.value.problem is KeyProblem.MALFORMED, repr(char)


@pytest.mark.parametrize(
    "value", ["\xa0abc", "abc\xa0", "abc\u3000", "\u2028abc", "abc\x85", '"abc"\xa0']
)
def test_a_key_wrapped_in_non_ascii_white_space_is_not_the_bare_key(value: str) -> None:
    # Only the header's own white space (SP, HTAB) surrounds a key: a no-break space is
    # part of the value, so the request is refused rather than replayed the key `abc`.
    with pytest.raises(BadKey) as raised:
        parse_key([value])
    assert raised.value.problem is KeyProblem.MALFORMED


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ('"a b"', "a b"),  # spaces are allowed inside an sf-string
        ('"8e03 978e"', "8e03 978e"),
        ('"k";x=1', "k"),  # an Item's parameters are accepted and ignored
        ('"k";x=1;y', "k"),
        ('"k";note="a;b"', "k"),
        ('"~!#$%&()*+,-./:;<=>?@[]^_`{|}"', "~!#$%&()*+,-./:;<=>?@[]^_`{|}"),
    ],
)
def test_keys_are_rfc_8941_items(value: str, key: str) -> None:
    assert parse_key([value]) == key


def test_record_key_has_one_hash_tag_and_no_raw_parts() -> None:
    key = record_key("idem", "payments", tenant_id(["Bearer s3cret"]), "my-key")
    assert key.startswith("idem:{payments:") and key.endswith("}")
    assert key.count("{") == 1 and key.count("}") == 1
    assert "s3cret" not in key and "my-key" not in key


def test_tenants_differ_and_are_stable() -> None:
    assert tenant_id(["a"]) == tenant_id(["a"])
    assert tenant_id(["a"]) != tenant_id(["b"])
    assert tenant_id(["ab", ""]) != tenant_id(["a", "b"])  # no ambiguity between parts
    assert tenant_id([None]) == tenant_id([""])


@pytest.mark.parametrize(
    ("body", "pointer", "key"),
    [
        (b'{"request_id": "r 1"}', "/request_id", "r 1"),
        (b'{"meta": {"a/b": 42}}', "/meta/a~1b", "42"),
        (b'{"items": ["x", "y"]}', "/items/1", "y"),
        (b'{"other": 1}', "/request_id", None),
        (b'{"request_id": null}', "/request_id", None),
        (b"not json", "/request_id", None),
        # JSON that orjson refuses but JSON parsers commonly read: the key is still found.
        (b'{"request_id": "r2", "note": "cut \\ud83d"}', "/request_id", "r2"),
        (b'\xef\xbb\xbf{"request_id": "r3"}', "/request_id", "r3"),
    ],
)
def test_a_key_from_a_json_body_member(body: bytes, pointer: str, key: str | None) -> None:
    assert json_key(body, pointer) == key


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b'{"k": ""}', KeyProblem.EMPTY),
        (b'{"k": true}', KeyProblem.MALFORMED),
        (b'{"k": {"a": 1}}', KeyProblem.MALFORMED),
        (b'{"k": "caf\\u00e9"}', KeyProblem.MALFORMED),
        (b'{"k": "' + b"a" * 256 + b'"}', KeyProblem.TOO_LONG),
    ],
)
def test_a_bad_json_key_is_refused(body: bytes, problem: KeyProblem) -> None:
    with pytest.raises(BadKey) as caught:
        json_key(body, "/k")
    assert caught.value.problem is problem


def test_sources_must_agree_on_the_key() -> None:
    assert agreed_key([("Idempotency-Key", None), ("X-Idempotency-Key", None)]) is None
    assert agreed_key([("Idempotency-Key", "a"), ("X-Idempotency-Key", "a")]) == "a"
    assert agreed_key([("Idempotency-Key", None), ("the body's /id", "b")]) == "b"
    with pytest.raises(BadKey) as caught:
        agreed_key([("Idempotency-Key", "a"), ("the body's /id", "b")])
    assert caught.value.problem is KeyProblem.CONFLICTING
    assert "Idempotency-Key and the body's /id" in str(caught.value)


def test_replayed_headers_follow_the_credential_policies() -> None:
    headers = [("Set-Cookie", "a=1"), ("X-A", "1"), ("WWW-Authenticate", "Bearer")]
    assert replayed_headers(headers, "scoped", "scoped", anonymous=False) == headers
    assert replayed_headers(headers, "scoped", "scoped", anonymous=True) == [("X-A", "1")]
    assert replayed_headers(headers, "strip", "keep", anonymous=False) == headers[1:]
    assert replayed_headers(headers, "keep", "strip", anonymous=True) == headers[:2]


def test_a_scope_value_keeps_its_unicode_white_space() -> None:
    # The upstream sees `Bearer t\xa0`, another credential than `Bearer t`: another tenant.
    values = {"Authorization": ["Bearer t\xa0"]}
    scoped = scope_values(lambda name: values.get(name, []), ["Authorization"], [], False)
    assert tenant_id(scoped) != tenant_id(["Bearer t"])
    assert tenant_id(scope_values(lambda name: ["\u3000"], ["X-Tenant-Id"], [], False)) != (
        tenant_id([""])
    )


@pytest.mark.parametrize("prefix", ["idem", "idem:v2", "a.b-c_d"])
def test_a_records_name_says_its_prefix_and_route_whatever_the_prefix(prefix: str) -> None:
    """What the start's look for records under another prefix reads (`store.prefixes`): a
    prefix holding colons ends where the route begins, in either format."""
    for name in record_names(prefix, "pay.v1", tenant_id(["t"]), digest("k")):
        assert prefix_and_route(name) == (prefix, "pay.v1")
        assert route_of_name(prefix, name) == "pay.v1"
        assert route_of_name("idem2" if prefix == "idem" else "idem", name) is None
    for other in ("idem:dictionary:{pay}:0001", "idem:attention:pay", "idem:compact-since"):
        assert prefix_and_route(other) is None
