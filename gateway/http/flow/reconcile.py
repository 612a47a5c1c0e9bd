"""The reconcile lookup: asking the upstream whether a call whose answer was lost ran.

Only the asking lives here; what its answer means is `core.decision.on_lookup`, and what is
then done with the key is `http.flow.settle`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from gateway.config.reconcile import Reconcile
from gateway.core.headers import unwritable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Found:
    """The lookup's answer; `status` None when there was no usable one."""

    status: int | None
    content_type: str | None = None
    body: bytes = b""


# A key that is a whole path segment of these would be resolved away by the URL parser.
_DOT_SEGMENTS = frozenset({".", ".."})


class _TooLarge(Exception):
    pass


async def look_up(
    config: Reconcile, request: web.Request, key: str, tls: ssl.SSLContext | bool = True
) -> Found:
    """Ask the upstream about the client's idempotency key (from whichever source the route
    read it), as the route's `reconcile` says; an https lookup trusts what `tls` trusts
    (the upstream clients' context).

    A refused connection, a timeout, a body over `max_body` or a key that cannot be put in
    the URL give a Found without status: the caller falls back to `on_unknown_outcome`."""
    if key in _DOT_SEGMENTS:  # resolved away before sending: it would ask about another path
        log.warning("reconcile lookup not made: the key is a dot-segment (. or ..)")
        return Found(None)
    if config.after is not None:
        await asyncio.sleep(config.after)  # the lease is kept by the caller's heartbeat
    headers = {
        name: request.headers[name] for name in config.forward_headers if name in request.headers
    }
    headers.update(config.headers_for(key))
    timeout = aiohttp.ClientTimeout(total=config.timeout)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.request(
                config.method,
                config.url_for(key),
                headers=headers,
                allow_redirects=False,
                ssl=tls,
            ) as answer,
        ):
            body = await _read(answer, config.max_body)
            content_type = answer.headers.get("Content-Type")
            if content_type is not None and unwritable(content_type.encode("utf-8", "replace")):
                raise ValueError("a control byte in the lookup's Content-Type")  # unreplayable
            return Found(answer.status, content_type, body)
    except (TimeoutError, aiohttp.ClientError, _TooLarge, ValueError) as exc:
        log.warning("reconcile lookup failed: %s", type(exc).__name__)
        return Found(None)


async def _read(answer: aiohttp.ClientResponse, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in answer.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)
