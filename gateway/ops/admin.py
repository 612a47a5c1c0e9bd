"""The admin listener: health, readiness, Prometheus metrics and the operators' key endpoints.

It runs in the gateway's process on a port of its own (`admin:` in the config), started and
stopped with the public application. Each worker of `--workers N` takes a port of its own from
`admin.port` upwards (see README, "Admin listener").
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.config.coherence import same_address
from gateway.config.policy import Route
from gateway.config.settings import Admin
from gateway.errors import ConfigError
from gateway.http.app import METRICS, SERVICES
from gateway.http.certificates import attach_tls
from gateway.http.eviction import eviction_risk
from gateway.http.problems import problem
from gateway.ops import keyops
from gateway.ops.listener import ListenError, bind_first_free
from gateway.store.store import Store

log = logging.getLogger(__name__)

PUBLIC = web.AppKey("public", web.Application)
# Worker processes take admin ports from admin.port up to admin.port + MAX_WORKERS - 1.
MAX_WORKERS = 64


@dataclass(slots=True)
class AdminState:
    draining: bool = False  # set once shutdown begins: /readyz answers 503 from then on
    port: int = 0  # where the admin listener listens, once started


STATE = web.AppKey("admin_state", AdminState)
TOKEN = web.AppKey("admin_token", str)


class KeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    route: str
    key: str
    tenant: list[str] = Field(default_factory=list)  # the scope headers' values, in order


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


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    draining = request.app[STATE].draining
    services = request.app[PUBLIC][SERVICES]
    redis_ok = await services.store.ready()
    risk = await eviction_risk(services) if redis_ok else None
    refused = bool(risk) and not services.settings.redis.accept_eviction
    ready = redis_ok and not draining and not refused
    body = {"ready": ready, "redis": redis_ok, "draining": draining, "eviction_risk": risk}
    return web.json_response(body, status=200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[PUBLIC][METRICS].registry
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


KeyHandler = Callable[[web.Request, Any], Awaitable[web.Response]]


def _keys_endpoint(
    model: type[KeyRequest], op: KeyHandler
) -> Callable[..., Awaitable[web.Response]]:
    """Bearer authentication, body validation and error mapping around one key operation."""

    async def endpoint(request: web.Request) -> web.Response:
        token = request.app.get(TOKEN)
        if token is None:
            return problem(
                403,
                "admin-token-unset",
                "Key endpoints disabled",
                "set admin.token to use the /keys endpoints",
            )
        # Bytes not UTF-8 come as surrogates: compared as they came, never a 500.
        given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, f"Bearer {token}".encode()):
            return problem(
                401,
                "unauthorized",
                "Unauthorized",
                "a valid bearer token is required",
                {"WWW-Authenticate": 'Bearer realm="idem-gateway admin"'},
            )
        try:
            body = model.model_validate_json(await request.read())
        except ValidationError as exc:
            detail = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            return problem(400, "bad-admin-request", "Bad request", detail)
        try:
            return await op(request, body)
        except keyops.KeyOpError as exc:
            return problem(exc.status, exc.slug, "Key operation refused", str(exc))

    return endpoint


def _target(request: web.Request, body: KeyRequest) -> tuple[Store, Route, str]:
    services = request.app[PUBLIC][SERVICES]
    route, rkey = keyops.locate(services.settings, body.route, body.tenant, body.key)
    return services.store, route, rkey


async def _show(request: web.Request, body: KeyRequest) -> web.Response:
    store, _, rkey = _target(request, body)
    found = await keyops.show(store, rkey)
    return web.json_response(found, status=404 if found["state"] == "absent" else 200)


async def _purge(request: web.Request, body: KeyRequest) -> web.Response:
    store, _, rkey = _target(request, body)
    if not await keyops.purge(store, rkey):
        raise keyops.KeyOpError(404, "no record for this key")
    log.warning("admin: purged a record on route %s", body.route)
    return web.json_response({"purged": True})


async def _resolve(request: web.Request, body: ResolveRequest) -> web.Response:
    store, route, rkey = _target(request, body)
    if body.purge:
        await keyops.resolve_by_purge(store, rkey)
    else:
        assert body.status is not None
        await keyops.resolve_with(
            store, route, rkey, body.status, body.body_bytes(), body.content_type
        )
    log.warning("admin: resolved an unknown outcome on route %s", body.route)
    return web.json_response({"resolved": True, "purged": body.purge})


def create_admin_app(
    public: web.Application, token: str | None, state: AdminState
) -> web.Application:
    """The admin application of the gateway `public`."""
    app = web.Application()
    app[PUBLIC] = public
    app[STATE] = state
    if token is not None:
        app[TOKEN] = token
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/keys/show", _keys_endpoint(KeyRequest, _show))
    app.router.add_post("/keys/purge", _keys_endpoint(KeyRequest, _purge))
    app.router.add_post("/keys/resolve", _keys_endpoint(ResolveRequest, _resolve))
    return app


def attach_admin(
    public: web.Application,
    settings: Admin,
    worker: bool = False,
    public_address: tuple[str, int] | None = None,
) -> AdminState:
    """Serve the admin app beside `public` for as long as it runs; call before it starts.

    A worker of `--workers N` takes the first free port of `admin.port`, `admin.port + 1`, ...
    (up to MAX_WORKERS ports), so that each worker's metrics can be scraped on its own. The
    returned state shows the bound port once the listener has started.
    """
    state = AdminState()
    tls = None
    if settings.tls is not None:
        tls = attach_tls(public, "admin", settings.tls, public[METRICS]).context
    scheme = "http" if tls is None else "https"

    async def draining(app: web.Application) -> None:
        state.draining = True

    async def listener(app: web.Application) -> AsyncIterator[None]:
        runner = web.AppRunner(create_admin_app(app, settings.token, state), access_log=None)
        await runner.setup()
        try:
            try:
                sock = bind_first_free(settings.host, settings.port, MAX_WORKERS if worker else 1)
            except ListenError as exc:
                raise ConfigError(f"admin.port: {exc}") from None
            if public_address is not None and _same_address(sock, public_address):
                sock.close()
                raise ConfigError(
                    f"admin.port: {settings.host}:{settings.port} is the public listener's "
                    "address (listen.host, listen.port): the admin listener needs its own"
                )
            # A site on a socket bound here: a port lost to a sibling worker is skipped before
            # aiohttp registers a site for it (a failed TCPSite stays in the runner's sites).
            await web.SockSite(runner, sock, ssl_context=tls).start()
            state.port = int(sock.getsockname()[1])
            log.info("admin listener on %s://%s:%d", scheme, settings.host, state.port)
            yield
        finally:
            await runner.cleanup()

    public.on_shutdown.append(draining)
    public.cleanup_ctx.append(listener)
    return state


def _same_address(sock: socket.socket, public: tuple[str, int]) -> bool:
    """Whether `sock` took the public listener's address. The public socket is bound but
    listens only once the gateway serves, so the kernel lets the admin socket take its
    address (both reuse it) and the public listener then takes no connection at all:
    `localhost` and `127.0.0.1` are one address that the config's check cannot see."""
    host, port = sock.getsockname()[:2]
    return same_address((host, port), public)
