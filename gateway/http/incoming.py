"""Reading what the idempotency layer needs from a client's request: the body, in full and
bounded, and the tenant scope, from exactly the headers that are forwarded."""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.config.policy import Route
from gateway.core.keys import KeyProblem
from gateway.core.scope import ScopeProblem, scope_values

KEY_TITLES = {
    KeyProblem.EMPTY: "Empty idempotency key",
    KeyProblem.TOO_LONG: "Idempotency key too long",
    KeyProblem.MALFORMED: "Malformed idempotency key",
    KeyProblem.SEVERAL: "Several idempotency keys",
}
SCOPE_TITLES = {
    ScopeProblem.REPEATED: "Repeated scope header",
    ScopeProblem.HOP_BY_HOP: "Scope or key header named by Connection",
    ScopeProblem.MISSING: "Missing tenant scope",
}


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    """The client paused too long within its body, or took too long for all of it."""


async def read_body(request: web.Request, limit: int, gap: float, total: float) -> bytes:
    """The whole request body, refusing more than `limit` bytes before reading them, and a
    client that pauses more than `gap` seconds or takes more than `total` in all."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge
    loop = asyncio.get_running_loop()
    deadline = loop.time() + total
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            async with asyncio.timeout_at(min(loop.time() + gap, deadline)):
                chunk = await request.content.readany()
        except TimeoutError:
            raise BodyTimeout from None
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)


def scope_of(request: web.Request, route: Route) -> list[str]:
    """The route's scope values as the upstream will receive them; BadScope otherwise."""
    headers = request.headers
    return scope_values(
        lambda name: headers.getall(name, []), route.scope, route.key_header, route.require_scope
    )
