"""Idempotency keys: parsing the header, scoping by tenant, naming the Redis record."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from enum import StrEnum

MAX_KEY_LENGTH = 255


class KeyProblem(StrEnum):
    """Why a key is refused; each value is a problem type (docs/problems.md)."""

    EMPTY = "empty-key"
    TOO_LONG = "key-too-long"
    MALFORMED = "malformed-key"
    SEVERAL = "several-keys"


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


# One parameter: `;name` or `;name=value` (a bare item or an sf-string), as RFC 8941 writes it.
_PARAMETER = re.compile(r'^;\s*[a-z*][a-z0-9_.*-]*(?:=(?:"(?:[^"\\]|\\.)*"|[^;"\s]+))?')


def _parameters(rest: str) -> None:
    """What follows a quoted key: nothing, or RFC 8941 parameters (`;name` or `;name=value`,
    accepted and ignored)."""
    while rest:
        match = _PARAMETER.match(rest)
        if match is None:
            raise BadKey(KeyProblem.MALFORMED, "text after the closing quote")
        rest = rest[match.end() :].lstrip()


def _one_key(raw: str) -> str:
    value = raw.strip()
    if value.startswith('"'):
        key, rest = _sf_string(value)
        _parameters(rest.strip())
    else:
        key = value
        # The bare form: visible ASCII (0x21-0x7E), as a token and wider.
        if key and not all("!" <= char <= "~" for char in key):
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
