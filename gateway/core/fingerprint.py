"""Request fingerprints: same key with another payload must be told apart (422)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii as _quoted
from typing import Any, Final, Protocol

import orjson
from mypy_extensions import mypyc_attr

_NO_FINGERPRINT: Final = "-"


class Spec(Protocol):
    """What a route says identifies a payload (the config's `fingerprint:`)."""

    @property
    def mode(self) -> str: ...  # "body", "json" or "none"
    @property
    def headers(self) -> tuple[str, ...]: ...
    @property
    def ignore(self) -> tuple[str, ...]: ...  # JSON Pointers left out in json mode


def _without(document: Any, pointer: str) -> None:
    """Remove the member a JSON Pointer (RFC 6901) names, if it is there."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict):
            node = node.get(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return
    last = tokens[-1] if tokens else None
    if isinstance(node, dict) and last is not None:
        node.pop(last, None)
    elif isinstance(node, list) and last is not None and last.isdigit() and int(last) < len(node):
        del node[int(last)]


@mypyc_attr(native_class=False)  # a str subclass: compiled, a Python class still
class _Number(str):
    """A JSON number as written. Parsed as a double, 0.3 and 0.30000000000000001 (or 0.0 and
    1e-400) would be one payload, but an upstream that reads amounts as decimals sees two."""


def _distinct_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object; one that names a member twice is refused, as parsers differ on which of
    the two counts (so it is compared as bytes)."""
    members = dict(pairs)
    if len(members) != len(pairs):
        raise ValueError("a member named twice")
    return members


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _written(node: Any) -> str:
    """`node` as canonical JSON text: members sorted, no white space, strings escaped to
    ASCII, numbers as written."""
    kind = type(node)
    if kind is str:
        return _quoted(node)
    if kind is _Number:
        return str(node)
    if kind is dict:
        members = sorted(node.items())
        return "{" + ",".join([_quoted(k) + ":" + _written(v) for k, v in members]) + "}"
    if kind is list:
        return "[" + ",".join([_written(each) for each in node]) + "]"
    return "null" if node is None else "true" if node else "false"


def _canonical_json(body: bytes, ignore: tuple[str, ...]) -> bytes:
    """Member order and white space do not matter; a body that is not JSON (or names a
    member twice) counts as bytes."""
    try:
        document = json.loads(
            body,
            parse_float=_Number,
            parse_int=_Number,
            parse_constant=_not_json,
            object_pairs_hook=_distinct_members,
        )
        for pointer in ignore:
            _without(document, pointer)
        return _written(document).encode("ascii")
    except (ValueError, RecursionError):  # not JSON, not text, or nested too deep
        return body


def _before_exact_numbers(body: bytes, ignore: tuple[str, ...]) -> bytes:
    """json mode's canonical form before numbers were compared as written: through doubles,
    the last of two members of one name kept (orjson's reading)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    for pointer in ignore:
        _without(document, pointer)
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


# Hashed with a json-mode fingerprint since numbers are compared as written.
EXACT_JSON: Final = "json:exact-numbers"
# The configured fingerprint headers as the upstream receives them: each one's values in
# order (none: absent, or not forwarded).
Fields = Mapping[str, tuple[str, ...]]


def _sha256(texts: list[str], payload: bytes) -> str:
    """SHA-256 over each text and the payload, each one after its length."""
    h = hashlib.sha256()
    for part in [*[t.encode("utf-8", "surrogateescape") for t in texts], payload]:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def fingerprint(spec: Spec, method: str, path: str, query: str, fields: Fields, body: bytes) -> str:
    """SHA-256 over method, path, query, the configured headers and the body."""
    if spec.mode == "none":
        return _NO_FINGERPRINT
    # A header: its name, then each value after a NUL (which no value holds): absent, empty
    # and repeated values all read apart (the earlier reading joined name and first value
    # with a colon, which no name holds: the two never meet).
    texts = [
        method,
        path,
        query,
        *["\0".join([n.lower(), *fields.get(n, ())]) for n in spec.headers],
    ]
    if spec.mode != "json":
        return _sha256(texts, body)
    # Tagged: the earlier reading's canonical text of another payload can be the same bytes
    # ({"a":0.3} for {"a": 0.30000000000000001}), and must never match today's records.
    return _sha256([*texts, EXACT_JSON], _canonical_json(body, spec.ignore))


def earlier_fingerprint(
    spec: Spec, method: str, path: str, query: str, fields: Fields, body: bytes
) -> str | None:
    """The fingerprint an earlier version gave this request, where it may differ from
    today's (json mode read through doubles; a configured header by its first value), else
    None: a record it stored still answers its retries, rather than 422, while it is kept."""
    if spec.mode == "none" or (spec.mode != "json" and not spec.headers):
        return None
    payload = _before_exact_numbers(body, spec.ignore) if spec.mode == "json" else body
    first = [f"{n.lower()}:{(fields.get(n) or ('',))[0]}" for n in spec.headers]
    return _sha256([method, path, query, *first], payload)
