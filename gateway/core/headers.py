"""Header hygiene for both directions of the hop: what is forwarded, what is dropped.

Plain values in, plain values out: the HTTP layer and the upstream clients share these rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Final

# Hop-by-hop headers (RFC 9110 7.6.1) are never forwarded, in either direction.
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Set by the HTTP layer for the hop it writes, not copied from the other side.
FRAMING: Final = frozenset({"content-length", "host"})
# Request headers the upstream never receives as the client sent them (beside the hop by
# hop ones): the gateway's own X-Forwarded-* and framing.
REWRITTEN: Final = frozenset(
    {"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "content-length", "expect"}
)
# The client's body has been read already (or streams as it comes): a 100-continue
# handshake with the upstream would only stall it.
DROPPED_FROM_REQUESTS: Final = (*HOP_BY_HOP, *FRAMING, "expect")


def header_text(raw: bytes) -> str:
    """Header bytes (or a reason phrase) as text that holds them one for one: each byte is
    the character of the same number (Latin-1), so obs-text such as `caf\\xe9` and UTF-8
    alike come back as the same bytes (`http.answers.writing` writes them so)."""
    return raw.decode("latin-1")


# Bytes no HTTP/1.1 head may carry to a client (RFC 9110 5.5: HTAB is the one control byte
# allowed in a field value); the upstream parsers are lenient and let them through.
# Control bytes, HTAB excepted: none may stand in a head's line (RFC 9110 5.5).
_CONTROL: Final = "[\x00-\x08\x0a-\x1f\x7f]"
_UNWRITABLE: Final = re.compile(_CONTROL.encode("latin-1"))


def unwritable(field: bytes) -> bool:
    """Whether a header name, value or reason phrase holds a control byte."""
    return _UNWRITABLE.search(field) is not None


# The largest answer head either upstream client takes (aiohttp's is told the same, so an
# answer the httptools client records is one a pass-through passes on, and the other way round).
MAX_HEAD: Final = 1 << 20  # the whole head
MAX_FIELDS: Final = 1000  # header lines


def unwritable_head(reason: bytes, raw_headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether an answer's head holds a control byte, or passes one of the limits above:
    it could be neither written to the client nor replayed, so it is a malformed answer."""
    if len(raw_headers) > MAX_FIELDS:
        return True
    # One search over every field joined by HTAB, the one control byte a head may hold: it
    # runs for every answer, and one search costs less than one per name and value.
    joined = b"\t".join([reason, *chain.from_iterable(raw_headers)])
    return len(joined) > MAX_HEAD or unwritable(joined)


_UNWRITABLE_TEXT: Final = re.compile(_CONTROL)


def unwritable_text(reason: str, headers: Iterable[tuple[str, str]]) -> bool:
    """`unwritable_head` for a head held as text (`header_text`), in one search over all of
    it (HTAB, allowed, parts the fields). Text holding no byte string (a character above
    0xFF) is refused with UnicodeEncodeError, a ValueError, as encoding it would."""
    text = reason + "\t" + "\t".join(map("\t".join, headers))
    if not text.isascii():
        text.encode("latin-1")
    return _UNWRITABLE_TEXT.search(text) is not None


def connection_tokens(values: Iterable[str]) -> set[str]:
    """The lower-case header names that `Connection` values list."""
    return {
        token.strip().lower() for value in values for token in value.split(",") if token.strip()
    }


# Answer headers the gateway sets itself on every answer, its own value replacing the
# upstream's (docs/fidelity.md): neither passed on nor recorded.
REPLACED: Final = frozenset({"x-request-id"})
_NOT_PASSED_ON: Final = HOP_BY_HOP | REPLACED


def answer_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The upstream's answer headers as `header_text`, in order with repeats, hop-by-hop
    and REPLACED ones dropped. A `Content-Length` stays as sent (its spelling and its
    place), unless the answer is chunked: then the hop that writes the answer frames it."""
    # One pass over the headers (each name lowered once): it runs for every answer.
    pairs: list[tuple[str, str, str]] = []
    listed: list[str] = []  # the values of `Connection`
    chunked = False
    for raw_name, raw_value in raw:
        name, value = header_text(raw_name), header_text(raw_value)
        lowered = name.lower()
        if lowered == "connection":
            listed.append(value)
        elif lowered == "transfer-encoding":
            chunked = True
        pairs.append((name, value, lowered))
    drop = _NOT_PASSED_ON | connection_tokens(listed) if listed else _NOT_PASSED_ON
    if chunked:
        drop = drop | {"content-length"}
    return [(name, value) for name, value, lowered in pairs if lowered not in drop]


# Answer headers that hand a client's credentials or session to whoever replays the answer.
CREDENTIALS: Final = frozenset(
    {"authorization", "www-authenticate", "proxy-authenticate", "authentication-info"}
)


def _withheld(policy: str, anonymous: bool) -> bool:
    """Whether a replay leaves a header out under `policy` (keep, strip or scoped)."""
    return policy == "strip" or (policy == "scoped" and anonymous)


def replayed_headers(
    headers: Iterable[tuple[str, str]], set_cookie: str, credentials: str, anonymous: bool
) -> list[tuple[str, str]]:
    """A record's headers as a replay sends them: `Set-Cookie` and the credential headers
    as the route's `replay_set_cookie` and `replay_credentials` say. `scoped` keeps them
    for a request with a scope value (the record is that scope's own) and leaves them out
    in the anonymous scope, which every client without one shares."""
    drop = set()
    if _withheld(set_cookie, anonymous):
        drop.add("set-cookie")
    if _withheld(credentials, anonymous):
        drop |= CREDENTIALS
    if not drop:
        return list(headers)
    return [(name, value) for name, value in headers if name.lower() not in drop]


def foreign_coding(transfer_encodings: Iterable[str]) -> str | None:
    """The first transfer coding of a request body other than `chunked`, else None. The
    server undoes the chunking only: any other coding would reach the upstream as if it were
    the content, with nothing to name it (RFC 9112 6.1: 501)."""
    for value in transfer_encodings:
        for element in value.split(","):
            coding = element.strip()
            if coding and coding.lower() != "chunked":  # empty elements count for nothing
                return coding
    return None


def undecodable_header(raw_headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The name of the first header whose value is not valid UTF-8, else None.

    Such a value cannot be forwarded unchanged (the client library re-encodes header
    text and drops the undecodable bytes), so the request is refused rather than altered.
    """
    for name, value in raw_headers:
        if value.isascii():
            continue
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return name.decode("latin-1")
    return None
