"""Sending a recorded body back, checked against its recorded size and SHA-256."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

from aiohttp import web

from gateway.errors import BlobError


def check_inline(body: bytes, size: int, sha256: str) -> None:
    """BlobError(CORRUPT) unless an inline body matches its record (no digest: size only)."""
    if len(body) != size:
        raise BlobError(BlobError.CORRUPT, f"inline body has {len(body)} bytes, not {size}")
    if sha256 and hashlib.sha256(body).hexdigest() != sha256:
        raise BlobError(BlobError.CORRUPT, "inline body does not match its digest")


async def send_verified(
    response: web.StreamResponse, chunks: AsyncIterator[bytes], size: int, sha256: str
) -> bool:
    """Stream `chunks` to a prepared response, ending it only if they match the record.

    The last chunk is held back until the digest is checked, so a corrupt blob never reaches
    the client whole: BlobError is raised and the caller cuts the connection short of the
    announced Content-Length. False when the client went away.
    """
    digest = hashlib.sha256()
    seen = 0
    held = b""
    try:
        async for chunk in chunks:
            if held:
                await response.write(held)
            digest.update(chunk)
            seen += len(chunk)
            if seen > size:
                raise BlobError(BlobError.CORRUPT, f"blob is longer than {size} bytes")
            held = chunk
        if seen != size:
            raise BlobError(BlobError.CORRUPT, f"blob has {seen} bytes, not {size}")
        if digest.hexdigest() != sha256:
            raise BlobError(BlobError.CORRUPT, "blob does not match its digest")
        await response.write(held)
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        return False
    return True
