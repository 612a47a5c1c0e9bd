"""Reading what the idempotency layer needs from a client's request: the body, in full and
bounded, and the tenant scope, from exactly the headers that are forwarded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import hdrs, web

from gateway.config.policy import Route
from gateway.core.fingerprint import Fields
from gateway.core.headers import connection_tokens
from gateway.core.keys import agreed_key, json_key, parse_key
from gateway.core.scope import client_cert_part, scope_values
from gateway.http.answers.problems import BODY_TIMEOUT
from gateway.http.answers.writing import abort, prepare_quietly
from gateway.http.flow.context import Received
from gateway.http.server.client_cert import client_cert_values


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    """The client paused too long within its body, or took too long for all of it."""


class TimedBody:
    """The request body as the client sends it, cut with BodyTimeout when the client pauses
    more than `gap` seconds or takes more than `total` in all (`expired` says so after)."""

    def __init__(self, request: web.Request, gap: float, total: float) -> None:
        self._content = request.content
        self._gap = gap
        self._total = total
        self.expired = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._total
        while True:
            try:
                async with asyncio.timeout_at(min(loop.time() + self._gap, deadline)):
                    chunk = await self._content.readany()
            except TimeoutError:
                self.expired = True
                raise BodyTimeout from None
            if not chunk:
                return
            yield chunk


async def refuse_slow_body(request: web.Request, detail: str) -> web.StreamResponse:
    """408, then the connection is closed: the rest of a slow body is not waited for (aiohttp
    would otherwise linger, reading it, for up to 10 s)."""
    slow = BODY_TIMEOUT.answer(detail)
    if await prepare_quietly(slow, request):
        with contextlib.suppress(ConnectionError, RuntimeError):
            await slow.write_eof()
    return abort(request, slow)


async def read_body(received: Received) -> bytes:
    """The whole request body, refusing more than the route's `max_request_body` before
    reading it (BodyTooLarge), and a client that pauses or takes longer than the settings'
    `limits` allow (BodyTimeout)."""
    request, limit = received.request, received.route.max_request_body
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge
    if request.content.is_eof():
        # The body came whole with its head (the usual small one): no timers, no loop.
        body = request.content.read_nowait()
        if len(body) > limit:
            raise BodyTooLarge
        return body
    chunks: list[bytes] = []
    size = 0
    limits = received.settings.limits
    gap, total = limits.request_body_gap_timeout, limits.request_body_timeout
    async for chunk in TimedBody(request, gap, total):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def key_of(request: web.Request, route: Route, body: bytes | None) -> str | None:
    """The request's key from every source the route names (its key headers, a body
    member); BadKey when one is malformed or two disagree, None when none carries one."""
    found = [(name, parse_key(request.headers.getall(name, ()))) for name in route.key_header_names]
    if route.key_json_pointer is not None and body is not None:
        pointer = route.key_json_pointer
        found.append((f"the body's {pointer}", json_key(body, pointer)))
    return agreed_key(found)


def scope_of(request: web.Request, route: Route) -> list[str]:
    """The route's scope values as the upstream will receive them, or as the client's TLS
    certificate shows them; BadScope otherwise."""
    if route.client_cert_scope:
        return scope_values(
            lambda name: _cert_or_header(request, name),
            route.scope,
            route.key_header_names,
            route.require_scope,
        )
    headers = request.headers
    return scope_values(
        lambda name: headers.getall(name, []),
        route.scope,
        route.key_header_names,
        route.require_scope,
    )


def _cert_or_header(request: web.Request, name: str) -> list[str]:
    part = client_cert_part(name)
    return request.headers.getall(name, []) if part is None else client_cert_values(request, part)


NO_FIELDS: Fields = {}


def fingerprint_fields(request: web.Request, route: Route) -> Fields:
    """The route's fingerprint headers as the upstream receives them: every value, in order;
    one that a `Connection` header names is not forwarded, so it counts as absent."""
    names = route.fingerprint.headers
    if not names:
        return NO_FIELDS
    headers = request.headers
    dropped = connection_tokens(headers.getall(hdrs.CONNECTION, []))
    return {
        name: () if name.lower() in dropped else tuple(headers.getall(name, [])) for name in names
    }
