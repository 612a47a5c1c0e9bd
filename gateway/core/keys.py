"""Idempotency keys: parsing the header, scoping by tenant, naming the Redis record."""

from __future__ import annotations

import binascii
import functools
import hashlib
import json
import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Final

import orjson

from gateway.core.slots import slot_of, tag_for

MAX_KEY_LENGTH: Final = 255


class KeyProblem(StrEnum):
    """Why a key is refused; each value is a problem type (docs/problems.md)."""

    EMPTY = "empty-key"
    TOO_LONG = "key-too-long"
    MALFORMED = "malformed-key"
    SEVERAL = "several-keys"
    CONFLICTING = "conflicting-keys"  # two sources (headers, a body member) disagree


class BadKey(ValueError):
    """The Idempotency-Key header is malformed; the message says how."""

    def __init__(self, problem: KeyProblem, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem


def _sf_string(value: str) -> tuple[str, str]:
    """An RFC 8941 sf-string at the start of `value` (`"..."`, escaping only \\" and \\\\,
    any printable ASCII inside, spaces included): its content and the text after it."""
    out = []
    i = 1
    while i < len(value):
        char = value[i]
        if char == "\\":
            if i + 1 >= len(value) or value[i + 1] not in '"\\':
                raise BadKey(KeyProblem.MALFORMED, 'a quoted key may only escape " and \\')
            out.append(value[i + 1])
            i += 2
            continue
        if char == '"':
            return "".join(out), value[i + 1 :]
        if not " " <= char <= "~":
            raise BadKey(KeyProblem.MALFORMED, "a quoted key may hold only printable ASCII")
        out.append(char)
        i += 1
    raise BadKey(KeyProblem.MALFORMED, "a quoted key has no closing quote")


# The white space around a header value (RFC 9110 5.6.3): str.strip() would also take a
# no-break space or U+3000 off, making "\xa0abc" the key "abc" and replaying its answer.
_OWS: Final = " \t"


# One parameter: `;name` or `;name=value` (a bare item or an sf-string), as RFC 8941 writes it.
_PARAMETER: Final = re.compile(r'^;\s*[a-z*][a-z0-9_.*-]*(?:=(?:"(?:[^"\\]|\\.)*"|[^;"\s]+))?')


def _parameters(rest: str) -> None:
    """What follows a quoted key: nothing, or RFC 8941 parameters (`;name` or `;name=value`,
    accepted and ignored)."""
    while rest:
        match = _PARAMETER.match(rest)
        if match is None:
            raise BadKey(KeyProblem.MALFORMED, "text after the closing quote")
        rest = rest[match.end() :].lstrip(_OWS)


def _one_key(raw: str) -> str:
    value = raw.strip(_OWS)
    if value.startswith('"'):
        key, rest = _sf_string(value)
        _parameters(rest.strip(_OWS))
    else:
        key = value
        # The bare form: visible ASCII (0x21-0x7E), as a token and wider.
        if not _visible_ascii(key):
            raise BadKey(KeyProblem.MALFORMED, "the key may hold only visible ASCII characters")
    if not key:
        raise BadKey(KeyProblem.EMPTY, "the key is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise BadKey(
            KeyProblem.TOO_LONG, f"the key is {len(key)} characters long; at most {MAX_KEY_LENGTH}"
        )
    return key


def parse_key(values: Iterable[str]) -> str | None:
    """The key from every value of the header: None when absent, BadKey when malformed.

    The header is the draft's RFC 8941 Item: an sf-string (`"a b"`: any printable ASCII,
    spaces included), with parameters accepted and ignored (`"k";v=1`); a bare value of
    visible ASCII means the same key as the quoted one. Repeated headers are accepted only
    when they all carry the same key.
    """
    found = {_one_key(raw) for raw in values}
    if len(found) > 1:
        raise BadKey(KeyProblem.SEVERAL, "the request carries two different keys")
    return found.pop() if found else None


def _visible_ascii(text: str) -> bool:
    """Only 0x21-0x7E: printable ASCII but the space, checked in C rather than per character
    in Python (a key is read on every request)."""
    return text.isascii() and text.isprintable() and " " not in text


def _checked(key: str) -> str:
    if not key:
        raise BadKey(KeyProblem.EMPTY, "the key is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise BadKey(
            KeyProblem.TOO_LONG, f"the key is {len(key)} characters long; at most {MAX_KEY_LENGTH}"
        )
    if not (key.isascii() and key.isprintable()):  # 0x20-0x7E, checked in C
        raise BadKey(KeyProblem.MALFORMED, "the key may hold only printable ASCII characters")
    return key


_NOT_JSON: Final = object()


def _json(body: bytes) -> object:
    """The body as JSON, else _NOT_JSON. What orjson refuses but JSON parsers commonly read
    (a lone surrogate escape, as a JavaScript client sends for a cut emoji; a leading byte
    order mark, RFC 8259 8.1) is read by the standard library's parser: a key beside it
    must not go unseen, or the request runs unprotected on every retry."""
    body = body.removeprefix(b"\xef\xbb\xbf")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return _NOT_JSON


def json_key(body: bytes, pointer: str) -> str | None:
    """The key a JSON body carries at `pointer` (RFC 6901): a string (or an integer, as its
    digits) with what an sf-string may hold; None when the body is no JSON or lacks it."""
    node = _json(body)
    if node is _NOT_JSON:
        return None
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    if node is None:
        return None
    if isinstance(node, int) and not isinstance(node, bool):
        node = str(node)
    if not isinstance(node, str):
        raise BadKey(KeyProblem.MALFORMED, f"the body's {pointer} is not a string")
    return _checked(node)


def agreed_key(found: Iterable[tuple[str, str | None]]) -> str | None:
    """The one key that every source carrying one agrees on: `found` is (where, key) per
    source (a header name, a body member), the key None where that source has none."""
    keys: dict[str, str] = {}
    for where, key in found:
        if key is not None:
            keys.setdefault(key, where)
    if len(keys) > 1:
        first, second = list(keys.values())[:2]
        raise BadKey(KeyProblem.CONFLICTING, f"{first} and {second} carry different keys")
    return next(iter(keys), None)


def digest(*parts: bytes | str) -> str:
    """A 128-bit hex digest of the parts, unambiguous about where each part ends."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:32]


def tenant_id(scope_values: Iterable[str | None]) -> str:
    """The tenant, hashed: raw credentials never reach Redis."""
    values = [value or "" for value in scope_values]
    if not any(values):  # the anonymous scope, which every request without one shares
        return _anonymous(len(values))
    return digest(*values)


@functools.lru_cache(maxsize=8)
def _anonymous(count: int) -> str:
    return digest(*[""] * count)


def record_key(prefix: str, route: str, tenant: str, key: str) -> str:
    """`prefix:{route:tenant:keyhash}`, the record's key in format 1; the braces are the
    Cluster hash tag of the record."""
    return hashed_record_key(prefix, route, tenant, digest(key))


def hashed_record_key(prefix: str, route: str, tenant: str, key_hash: str) -> str:
    """`record_key` for a key already digested (`digest(key)`)."""
    return f"{prefix}:{{{route}:{tenant}:{key_hash}}}"


def record_names(prefix: str, route: str, tenant: str, key_hash: str) -> tuple[str, str]:
    """The record's key in format 1 and in format 2, both in the one Cluster slot that
    route, tenant and key decide (`core.slots`).

    Format 2's is `prefix:route:{tag}digest`: the slot's three-character tag and 128 bits of
    SHA-256 over tenant and key digests, in base64url (41 bytes for `idem:payments:`, where
    format 1's takes 81)."""
    tag = f"{route}:{tenant}:{key_hash}"
    both = hashlib.sha256(f"{tenant}:{key_hash}".encode("ascii")).digest()[:16]
    short = binascii.b2a_base64(both, newline=False)[:22].translate(URL_SAFE).decode("ascii")
    return f"{prefix}:{{{tag}}}", f"{prefix}:{route}:{{{tag_for(slot_of(tag))}}}{short}"


# base64url's alphabet from base64's (what base64.urlsafe_b64encode does, in one C call).
URL_SAFE: Final = bytes.maketrans(b"+/", b"-_")


# A record's name in either format, past its prefix (routes are [A-Za-z0-9_.-]+).
_RECORD_NAME: Final = re.compile(
    r":(?:\{([A-Za-z0-9_.-]+):[0-9a-f]{1,64}:[0-9a-f]{1,64}\}"  # format 1
    r"|([A-Za-z0-9_.-]+):\{[A-Za-z0-9_-]{3}\}[A-Za-z0-9_-]{22})"  # format 2
)


def route_of_name(prefix: str, name: str) -> str | None:
    """The route a record's name (`record_names`, either format) holds; None for a name
    that is no record's."""
    if not name.startswith(prefix):
        return None
    found = _RECORD_NAME.fullmatch(name, len(prefix))
    return None if found is None else found[1] or found[2]


# A record's name under any key prefix (`redis.key_prefix`'s characters): the prefix ends
# where the name's route does not hold it, as a route holds no colon.
_ANY_PREFIX: Final = re.compile(r"([A-Za-z0-9_.:-]+?)" + _RECORD_NAME.pattern)


def prefix_and_route(name: str) -> tuple[str, str] | None:
    """The key prefix and the route of a record's name under any prefix (`record_names`,
    either format); None for a name that is no record's."""
    found = _ANY_PREFIX.fullmatch(name)
    return None if found is None else (found[1], found[2] or found[3])
