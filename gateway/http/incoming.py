"""Reading what the idempotency layer needs from a client's request: the body, in full and
bounded, and the tenant scope, from exactly the headers that are forwarded."""

from __future__ import annotations

from aiohttp import web

from gateway.config.policy import Route
from gateway.core.keys import KeyProblem, agreed_key, json_key, parse_key
from gateway.core.scope import ScopeProblem, scope_values

KEY_TITLES = {
    KeyProblem.EMPTY: "Empty idempotency key",
    KeyProblem.TOO_LONG: "Idempotency key too long",
    KeyProblem.MALFORMED: "Malformed idempotency key",
    KeyProblem.SEVERAL: "Several idempotency keys",
    KeyProblem.CONFLICTING: "Conflicting idempotency keys",
}
SCOPE_TITLES = {
    ScopeProblem.REPEATED: "Repeated scope header",
    ScopeProblem.HOP_BY_HOP: "Scope or key header named by Connection",
    ScopeProblem.MISSING: "Missing tenant scope",
}


class BodyTooLarge(Exception):
    pass


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole request body, refusing more than `limit` bytes before reading them."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
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
    """The route's scope values as the upstream will receive them; BadScope otherwise."""
    headers = request.headers
    return scope_values(
        lambda name: headers.getall(name, []),
        route.scope,
        route.key_header_names,
        route.require_scope,
    )
