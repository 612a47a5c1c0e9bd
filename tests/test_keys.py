"""Key parsing, tenant hashing and record naming."""

from __future__ import annotations

import pytest

from gateway.core.keys import BadKey, parse_key, record_key, tenant_id


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
    "values",
    [[""], ['""'], ["x" * 256], ["a b"], ["ctl\x01"], ["é"], ['"open'], ['"a"b'], ["a", "b"]],
)
def test_parse_key_rejects(values: list[str]) -> None:
    with pytest.raises(BadKey):
        parse_key(values)


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
