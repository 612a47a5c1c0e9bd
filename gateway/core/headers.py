"""Header hygiene for both directions of the hop: what is forwarded, what is dropped.

Plain values in, plain values out: the HTTP layer and the upstream clients share these rules.
"""

from __future__ import annotations

from collections.abc import Iterable

# Hop-by-hop headers (RFC 9110 7.6.1) are never forwarded, in either direction.
HOP_BY_HOP = frozenset(
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
FRAMING = frozenset({"content-length", "host"})
# The client's body has been read already (or streams as it comes): a 100-continue
# handshake with the upstream would only stall it.
DROPPED_FROM_REQUESTS = (*HOP_BY_HOP, *FRAMING, "expect")


def header_text(raw: bytes) -> str:
    """Header bytes (or a reason phrase) as the text aiohttp writes back as UTF-8: valid
    UTF-8 (the usual case beyond ASCII, e.g. a file name) round-trips byte for byte; other
    bytes read as Latin-1."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def connection_tokens(values: Iterable[str]) -> set[str]:
    """The lower-case header names that `Connection` values list."""
    return {
        token.strip().lower() for value in values for token in value.split(",") if token.strip()
    }


def dropped(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Hop-by-hop names plus those the Connection header lists."""
    listed = connection_tokens(value for name, value in headers if name.lower() == "connection")
    return set(HOP_BY_HOP | FRAMING) | listed


def answer_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The upstream's answer headers, in order with repeats, hop-by-hop and framing dropped."""
    pairs = [(name.decode("latin-1"), header_text(value)) for name, value in raw]
    drop = dropped(pairs)
    return [(name, value) for name, value in pairs if name.lower() not in drop]


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
