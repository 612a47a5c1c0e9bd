"""Idempotency keys: parsing the header, scoping by tenant, naming the Redis record."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

MAX_KEY_LENGTH = 255


class BadKey(ValueError):
    """The Idempotency-Key header is malformed; the message says how."""


def _unquote(value: str) -> str:
    """The content of an RFC 8941 sf-string (`"..."` with \\" and \\\\ escapes)."""
    out = []
    i = 1
    while i < len(value):
        char = value[i]
        if char == "\\":
            if i + 1 >= len(value) or value[i + 1] not in '"\\':
                raise BadKey('a quoted key may only escape " and \\')
            out.append(value[i + 1])
            i += 2
            continue
        if char == '"':
            if i != len(value) - 1:
                raise BadKey("text after the closing quote")
            return "".join(out)
        out.append(char)
        i += 1
    raise BadKey("a quoted key has no closing quote")


def parse_key(values: Iterable[str]) -> str | None:
    """The key from every value of the header: None when absent, BadKey when malformed.

    A structured-field string and a bare token mean the same key. Several headers are
    accepted only when they all carry the same key.
    """
    found: set[str] = set()
    for raw in values:
        value = raw.strip()
        key = _unquote(value) if value.startswith('"') else value
        if not key:
            raise BadKey("the key is empty")
        if len(key) > MAX_KEY_LENGTH:
            raise BadKey(f"the key is {len(key)} characters long; at most {MAX_KEY_LENGTH}")
        # Visible ASCII is 0x21-0x7E: printable ASCII less the space.
        if not (key.isascii() and key.isprintable()) or " " in key:
            raise BadKey("the key may hold only visible ASCII characters")
        found.add(key)
    if len(found) > 1:
        raise BadKey("the request carries two different keys")
    return found.pop() if found else None


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
    return digest(*(value or "" for value in scope_values))


def record_key(prefix: str, route: str, tenant: str, key: str) -> str:
    """`prefix:{route:tenant:keyhash}`; the braces are the Cluster hash tag of the record."""
    return hashed_record_key(prefix, route, tenant, digest(key))


def hashed_record_key(prefix: str, route: str, tenant: str, key_hash: str) -> str:
    """`record_key` for a key already digested (`digest(key)`)."""
    return f"{prefix}:{{{route}:{tenant}:{key_hash}}}"
