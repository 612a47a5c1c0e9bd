"""Checks on a request's head that the HTTP parser leaves to the application."""

from __future__ import annotations

from collections.abc import Iterable


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
