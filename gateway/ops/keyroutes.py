"""The admin listener's key endpoints (`/keys/show`, `/keys/purge`, `/keys/resolve`,
`/keys/settle`) and the console's key lookup: bearer authentication, body validation, one
audit line per change."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.config.policy import Route
from gateway.errors import StoreUnavailable
from gateway.http.answers.problems import (
    ADMIN_TOKEN_UNSET,
    BAD_ADMIN_REQUEST,
    BAD_KEY_OPERATION,
    NO_RECORD,
    NO_SUCH_ROUTE,
    PURGE_UNCONFIRMED,
    RECORD_CHANGED,
    RECORD_NOT_CORRUPT,
    RECORD_NOT_UNKNOWN,
    UNAUTHORIZED,
)
from gateway.http.app import SERVICES
from gateway.ops import keyops, keyview
from gateway.ops.keyops import KeyOpProblem
from gateway.ops.needs import attention_page
from gateway.store import attention
from gateway.store.store import Store
from gateway.telemetry.logs import FIELDS

audit_log = logging.getLogger("gateway.audit")

PUBLIC = web.AppKey("public", web.Application)
TOKEN = web.AppKey("admin_token", str)
# Served on a worker's private socket: the supervisor names the operator's address.
PRIVATE = web.AppKey("private", bool)
FORWARDED_FOR = "X-Forwarded-For"


class KeyRequest(BaseModel):
    """A record named by the client's key (route, tenant values, key), or by its own id
    (`record`, the Redis key the attention list shows)."""

    model_config = ConfigDict(extra="forbid")
    route: str | None = None
    key: str | None = None
    tenant: list[str] = Field(default_factory=list)  # the scope headers' values, in order
    record: str | None = None

    @model_validator(mode="after")
    def _named_once(self) -> KeyRequest:
        if (self.record is None) == (self.route is None or self.key is None):
            raise ValueError("give route and key (and tenant), or record")
        if self.record is not None and (self.route or self.key or self.tenant):
            raise ValueError("give route and key (and tenant), or record, not both")
        return self


class PurgeRequest(KeyRequest):
    # A record whose request ran is purged only with this: a retry after it runs it again.
    confirm: bool = Field(default=False, strict=True)


class ResolveRequest(KeyRequest):
    purge: bool = False
    status: int | None = None
    body: str | None = None  # UTF-8 text
    body_base64: str | None = None
    content_type: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> ResolveRequest:
        if self.purge == (self.status is not None):
            raise ValueError("give either purge: true or a status (with a body)")
        if self.body is not None and self.body_base64 is not None:
            raise ValueError("give body or body_base64, not both")
        return self

    def body_bytes(self) -> bytes:
        if self.body_base64 is not None:
            try:
                return base64.b64decode(self.body_base64, validate=True)
            except binascii.Error as exc:
                raise keyops.KeyOpError(400, f"body_base64: {exc}") from None
        return (self.body or "").encode()


# The answer to each reason a key operation is refused.
REFUSED: Final = {
    KeyOpProblem.NO_SUCH_ROUTE: NO_SUCH_ROUTE,
    KeyOpProblem.NO_RECORD: NO_RECORD,
    KeyOpProblem.NOT_UNKNOWN: RECORD_NOT_UNKNOWN,
    KeyOpProblem.NOT_CORRUPT: RECORD_NOT_CORRUPT,
    KeyOpProblem.CHANGED: RECORD_CHANGED,
    KeyOpProblem.UNCONFIRMED: PURGE_UNCONFIRMED,
    KeyOpProblem.BAD_VALUE: BAD_KEY_OPERATION,
}
KeyHandler = Callable[[web.Request, Any], Awaitable[web.Response]]


def unauthorized(request: web.Request) -> web.Response | None:
    """The refusal of a request without the admin token (None: it has it)."""
    token = request.app.get(TOKEN)
    if token is None:
        return ADMIN_TOKEN_UNSET.answer()
    # Bytes not UTF-8 come as surrogates: compared as they came, never a 500.
    given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
    scheme, _, credentials = given.partition(b" ")
    # The scheme is case-insensitive (RFC 9110 11.1): `bearer` is `Bearer`.
    bearer = scheme.lower() == b"bearer"
    if not hmac.compare_digest(credentials.lstrip(b" ") if bearer else b"", token.encode()):
        _audit_refusal(request, "wrong token" if given else "no token")
        return UNAUTHORIZED.answer()
    return None


def _keys_endpoint(
    model: type[KeyRequest], op: KeyHandler
) -> Callable[..., Awaitable[web.Response]]:
    """Bearer authentication, body validation and error mapping around one key operation."""

    async def endpoint(request: web.Request) -> web.Response:
        refused = unauthorized(request)
        if refused is not None:
            return refused
        try:
            body = model.model_validate_json(await request.read())
        except ValidationError as exc:
            detail = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            return BAD_ADMIN_REQUEST.answer(detail)
        try:
            return await op(request, body)
        except keyops.KeyOpError as exc:
            return REFUSED[KeyOpProblem(exc.slug)].answer(str(exc))

    return endpoint


def _target(request: web.Request, body: KeyRequest) -> tuple[Store, Route, keyops.Names]:
    services = request.app[PUBLIC][SERVICES]
    if body.record is not None:
        route, names = keyops.located(services.settings, body.record)
    else:
        assert body.route is not None and body.key is not None  # the model's check
        route, names = keyops.locate(services.settings, body.route, body.tenant, body.key)
    return services.store, route, names


async def _show(request: web.Request, body: KeyRequest) -> web.Response:
    store, _, names = _target(request, body)
    found = await keyops.show(store, names)
    return web.json_response(found, status=404 if found["state"] == "absent" else 200)


async def _detail(request: web.Request, body: KeyRequest) -> web.Response:
    services = request.app[PUBLIC][SERVICES]
    _, route, names = _target(request, body)
    found = await keyview.detail(services.store, services.blobs, route, names)
    if found["state"] != "absent":
        # Its id, for the actions by record: the name that holds it.
        found |= {"record": found.get("record", names[0]), "route": route.name}
    return web.json_response(found)  # "absent" is an answer too: the page shows it


def _audit(request: web.Request, action: str, route: str, rkey: str) -> None:
    """One line per change an operator makes: what, which record (its key holds digests
    only), from where; the line's time says when."""
    fields = {"action": action, "route": route, "record": rkey, "remote": _remote(request)}
    audit_log.warning("admin: %s", action, extra={FIELDS: fields})


def _audit_refusal(request: web.Request, why: str) -> None:
    """A request refused for its token: what it asked for and from where, never what it
    gave."""
    fields = {"action": "refused", "why": why, "path": request.path, "remote": _remote(request)}
    audit_log.warning("admin: refused, %s", why, extra={FIELDS: fields})


def _remote(request: web.Request) -> str | None:
    remote = request.remote
    if request.app.get(PRIVATE):  # asked through the supervisor, which names the operator
        remote = request.headers.get(FORWARDED_FOR, remote)
    return remote


async def _purge(request: web.Request, body: PurgeRequest) -> web.Response:
    store, route, names = _target(request, body)
    rkey = await keyops.purge(store, names, body.confirm, '"confirm": true')
    _audit(request, "purge", route.name, rkey)
    await _settled(request, route.name, rkey)
    return web.json_response({"purged": True})


async def _resolve(request: web.Request, body: ResolveRequest) -> web.Response:
    store, route, names = _target(request, body)
    if body.purge:
        rkey = await keyops.resolve_by_purge(store, names)
    else:
        assert body.status is not None
        rkey = await keyops.resolve_with(
            store, route, names, body.status, body.body_bytes(), body.content_type
        )
    _audit(request, "resolve-purge" if body.purge else "resolve", route.name, rkey)
    await _settled(request, route.name, rkey)
    return web.json_response({"resolved": True, "purged": body.purge})


async def _settle(request: web.Request, body: KeyRequest) -> web.Response:
    store, route, names = _target(request, body)
    prefix = request.app[PUBLIC][SERVICES].settings.redis.key_prefix
    rkey = await keyops.settle(store, prefix, route, names)
    _audit(request, "settle", route.name, rkey)
    done = f"settled as an unknown outcome: {keyops.SETTLED}"
    return web.json_response({"settled": True, "state": "unknown", "detail": done})


def _authorized(
    handler: Callable[[web.Request], Awaitable[web.Response]],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def endpoint(request: web.Request) -> web.Response:
        return unauthorized(request) or await handler(request)

    return endpoint


async def _routes(request: web.Request) -> web.Response:
    """The routes and their scope headers, for the console's lookup form."""
    settings = request.app[PUBLIC][SERVICES].settings
    routes = [{"name": r.name, "scope": list(r.scope)} for r in settings.routes]
    return web.json_response({"routes": routes})


async def _attention(request: web.Request) -> web.Response:
    return await attention_page(request, request.app[PUBLIC][SERVICES])


async def _settled(request: web.Request, route: str, rkey: str) -> None:
    """Off the attention list; an index only, so a failure to update it is no error."""
    services = request.app[PUBLIC][SERVICES]
    with contextlib.suppress(StoreUnavailable):
        await attention.forget(services.store, services.settings.redis.key_prefix, route, rkey)


def add_key_routes(app: web.Application) -> None:
    app.router.add_post("/keys/show", _keys_endpoint(KeyRequest, _show))
    app.router.add_post("/keys/purge", _keys_endpoint(PurgeRequest, _purge))
    app.router.add_post("/keys/resolve", _keys_endpoint(ResolveRequest, _resolve))
    app.router.add_post("/keys/settle", _keys_endpoint(KeyRequest, _settle))
    app.router.add_post("/console/api/key", _keys_endpoint(KeyRequest, _detail))
    app.router.add_get("/console/api/routes", _authorized(_routes))
    app.router.add_get("/console/api/attention", _authorized(_attention))
