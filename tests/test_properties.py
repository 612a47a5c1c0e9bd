"""Property tests for the gateway's input handling: keys, config, headers."""

from __future__ import annotations

import string
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from hypothesis import example, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from gateway.config.loading import settings_from_dict
from gateway.config.settings import Settings
from gateway.core.headers import HOP_BY_HOP, answer_headers, undecodable_header
from gateway.core.keys import MAX_KEY_LENGTH, BadKey, parse_key, record_key
from gateway.errors import ConfigError
from gateway.http.flow.outgoing import forward_headers

VISIBLE = "".join(chr(c) for c in range(0x21, 0x7F))
keys = st.text(alphabet=VISIBLE, min_size=1, max_size=MAX_KEY_LENGTH)
header_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)


def quoted(key: str) -> str:
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


@given(st.lists(header_text, max_size=4))
def test_parse_key_returns_a_valid_key_or_raises_bad_key(values: list[str]) -> None:
    try:
        key = parse_key(values)
    except BadKey as exc:
        assert str(exc)
        return
    if not values:
        assert key is None
        return
    assert key is not None
    assert 1 <= len(key) <= MAX_KEY_LENGTH
    assert all(c in VISIBLE for c in key)


@given(keys, st.sampled_from(["", " ", "\t", "  "]))
def test_bare_and_quoted_forms_are_the_same_key(key: str, pad: str) -> None:
    assert parse_key([pad + quoted(key) + pad]) == key
    if not key.startswith('"'):
        assert parse_key([pad + key + pad]) == key
        assert parse_key([key, quoted(key)]) == key


@given(keys, keys)
def test_two_different_keys_are_refused(a: str, b: str) -> None:
    if a == b:
        assert parse_key([quoted(a), quoted(b)]) == a
    else:
        with pytest.raises(BadKey):
            parse_key([quoted(a), quoted(b)])


@given(keys, st.text(alphabet=VISIBLE + " ", min_size=1, max_size=MAX_KEY_LENGTH))
def test_keys_longer_or_with_spaces_inside_are_refused(key: str, other: str) -> None:
    with pytest.raises(BadKey):
        parse_key([key + "x" * (MAX_KEY_LENGTH + 1 - len(key))])
    if " " in other.strip():
        with pytest.raises(BadKey):
            parse_key([other])


@given(st.text(max_size=20), st.text(max_size=20), keys, keys)
def test_record_keys_separate_tenants_and_hide_raw_values(
    tenant_a: str, tenant_b: str, key_a: str, key_b: str
) -> None:
    from gateway.core.keys import tenant_id

    a = record_key("idem", "api", tenant_id([tenant_a]), key_a)
    b = record_key("idem", "api", tenant_id([tenant_b]), key_b)
    assert (a == b) == (tenant_a == tenant_b and key_a == key_b)
    assert set(a) <= set(string.ascii_letters + string.digits + "_.:-{}")
    assert a.count("{") == 1 and a.endswith("}")


json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True),
    st.text(max_size=30),
    st.sampled_from(["30s", "500ms", "0s", "-1s", "1KiB", "abc", "embedded", "redis://x:1/0",
                     "http://127.0.0.1:9", "http://", "${NOPE_NOT_SET}", "${HOME}", "/", "2xx",
                     "!429", "POST", "wait", "record", "open"]),
)  # fmt: skip
json_tree = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=20,
)
FIELDS = ["listen", "redis", "loop", "log_level", "upstream", "defaults", "routes"]
ROUTE_FIELDS = [
    "name", "path_prefix", "upstream", "methods", "lease", "retention", "record", "scope",
    "fingerprint", "timeouts", "max_request_body", "on_unknown_outcome", "on_in_flight",
    "fail_mode", "key_header", "in_flight_wait", "require_key",
]  # fmt: skip


def check_config(raw: Any) -> None:
    try:
        result = settings_from_dict(raw)
    except ConfigError as exc:
        assert str(exc)
    else:
        assert isinstance(result, Settings)


@settings(max_examples=150)
@given(json_tree)
def test_any_config_tree_is_settings_or_config_error(raw: Any) -> None:
    check_config(raw)


@settings(max_examples=150)
@given(
    st.dictionaries(st.sampled_from(FIELDS), json_tree, max_size=4),
    st.dictionaries(st.sampled_from(ROUTE_FIELDS), json_tree, max_size=4),
)
def test_near_valid_config_is_settings_or_config_error(
    top: dict[str, Any], route: dict[str, Any]
) -> None:
    base_route = {"name": "api", "path_prefix": "/", "upstream": "http://127.0.0.1:9", **route}
    check_config({"redis": {"url": "redis://127.0.0.1:1/0"}, "routes": [base_route], **top})


header_bytes = st.binary(max_size=40)
names = st.one_of(
    st.sampled_from([n.title().encode() for n in HOP_BY_HOP] + [b"Content-Length", b"Host",
                                                                b"Set-Cookie", b"X-A"]),
    st.text(alphabet=string.ascii_letters + "-", min_size=1, max_size=12).map(str.encode),
)  # fmt: skip


@given(st.lists(st.tuples(names, header_bytes), max_size=12))
@example([(b"Set-Cookie", b"\xc2\x80\xc2\x80")])  # valid UTF-8 beyond ASCII
@example([(b"Set-Cookie", b"\xc2")])  # not UTF-8
@example([(b"Content-Length", b"2"), (b"Transfer-Encoding", b"chunked")])
def test_answer_headers_never_pass_hop_by_hop_and_keep_the_rest_as_bytes(
    raw: list[tuple[bytes, bytes]],
) -> None:
    out = answer_headers(raw)
    listed = {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.decode("latin-1").split(",")
    }
    chunked = any(name.lower() == b"transfer-encoding" for name, _ in raw)
    dropped = HOP_BY_HOP | listed | ({"content-length"} if chunked else set())
    kept = [(n, v) for n, v in raw if n.decode("latin-1").lower() not in dropped]
    # order, repeats and every byte preserved: the text holds the bytes one for one
    assert [(n.encode("latin-1"), v.encode("latin-1")) for n, v in out] == kept


@given(st.lists(st.tuples(st.sampled_from(["Connection", "X-A", "X-B", "Keep-Alive", "TE",
                                           "X-Forwarded-For", "Upgrade"]),
                          st.text(alphabet=string.ascii_letters + ", -", max_size=20)),
                max_size=8))  # fmt: skip
def test_forward_headers_drop_hop_by_hop_and_add_forwarded(pairs: list[tuple[str, str]]) -> None:
    request = make_mocked_request("POST", "/pay", headers=CIMultiDict(pairs))
    out = forward_headers(request)
    named = {
        token.strip().lower()
        for name, value in pairs
        if name.lower() == "connection"
        for token in value.split(",")
    }
    for name in out:
        low = name.lower()
        assert low not in HOP_BY_HOP
        assert low not in named or low.startswith("x-forwarded-")
    assert "X-Forwarded-Proto" in out


@given(st.lists(st.tuples(names, header_bytes), max_size=8))
def test_undecodable_header_names_exactly_the_non_utf8_values(
    raw: list[tuple[bytes, bytes]],
) -> None:
    found = undecodable_header(raw)

    def decodes(value: bytes) -> bool:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    bad = [n.decode("latin-1") for n, v in raw if not decodes(v)]
    assert found == (bad[0] if bad else None)
