"""The admin listener: health, readiness, Prometheus metrics, the operators' key endpoints
and the console.

A single gateway process serves it on `admin.port`, started and stopped with the public
application. A worker of `--workers N` serves it on a private unix socket instead, which only
its supervisor reads: the supervisor answers on `admin.port` for every worker
(`ops.supervisor.admin_hub`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway import closing
from gateway.config.coherence import same_address
from gateway.config.settings import Admin
from gateway.errors import ConfigError
from gateway.http.app import LIVE, METRICS, SERVICES
from gateway.http.flow.eviction import eviction_risk
from gateway.http.server.certificates import attach_tls
from gateway.ops.admin_limits import guarded_app, serve
from gateway.ops.console import add_pages
from gateway.ops.history import HISTORY, History, history_page, keep
from gateway.ops.keyroutes import PRIVATE, PUBLIC, TOKEN, add_key_routes
from gateway.ops.listener import ListenError, bind, bind_private
from gateway.ops.overview import overview

log = logging.getLogger(__name__)


@dataclass(slots=True)
class AdminState:
    draining: bool = False  # set once shutdown begins: /readyz answers 503 from then on
    port: int = 0  # where the admin listener listens, once started


STATE = web.AppKey("admin_state", AdminState)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readiness(app: web.Application) -> dict[str, Any]:
    """Whether this process takes traffic: Redis answers, no evicting policy it must refuse,
    not draining."""
    draining = app[STATE].draining
    services = app[PUBLIC][SERVICES]
    redis_ok = await services.store.ready()
    risk = await eviction_risk(services) if redis_ok else None
    refused = bool(risk) and not services.settings.redis.accept_eviction
    ready = redis_ok and not draining and not refused
    return {"ready": ready, "redis": redis_ok, "draining": draining, "eviction_risk": risk}


async def readyz(request: web.Request) -> web.Response:
    body = await readiness(request.app)
    return web.json_response(body, status=200 if body["ready"] else 503)


async def console_overview(request: web.Request) -> web.Response:
    """The console's overview of this one process."""
    ready = await readiness(request.app)
    worker = {"worker": 0, "pid": os.getpid(), "up": True, **ready}
    families = request.app[PUBLIC][METRICS].registry.collect()
    return web.json_response(overview(families, [worker]), dumps=_dumps)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[PUBLIC][METRICS].registry
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def create_admin_app(
    public: web.Application, token: str | None, state: AdminState, private: bool = False
) -> web.Application:
    """The admin application of the gateway `public`; `private`: served to the supervisor
    of `--workers N` on the worker's own socket."""
    app = guarded_app(public[LIVE].settings.limits)
    app[PUBLIC] = public
    app[STATE] = state
    app[PRIVATE] = private
    if token is not None:
        app[TOKEN] = token
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    add_key_routes(app)
    app.router.add_get("/console/api/overview", console_overview)
    if not private:  # a --workers supervisor keeps the history of them all
        app[HISTORY] = History()
        app.router.add_get("/console/api/history", history_page)
    add_pages(app)
    return app


def attach_admin(
    public: web.Application,
    settings: Admin,
    channel: str | None = None,
    public_address: tuple[str, int] | None = None,
    sock: socket.socket | None = None,
) -> AdminState:
    """Serve the admin app beside `public` for as long as it runs; call before it starts.

    On `admin.host:admin.port` (the socket `sock`, when whatever started the gateway bound
    it), or, for a worker of `--workers N`, on the unix socket `channel` that its
    supervisor reads. The returned state shows the bound port once the listener has started.
    """
    given = sock
    state = AdminState()
    tls = None
    if settings.tls is not None and channel is None:  # a worker's channel is a unix socket
        tls = attach_tls(public, "admin", settings.tls, public[METRICS]).context
    scheme = "http" if tls is None else "https"

    async def draining(app: web.Application) -> None:
        state.draining = True

    async def listener(app: web.Application) -> AsyncIterator[None]:
        admin = create_admin_app(app, settings.token, state, private=channel is not None)
        runner = web.AppRunner(admin, access_log=None)
        async with contextlib.AsyncExitStack() as opened:
            if channel is not None:
                sock = bind_private(channel)
            else:
                sock = admin_socket(settings, public_address, given)
            opened.callback(closing.close, "the admin socket", sock.close)
            opened.push_async_callback(closing.aclose, "the admin listener", runner.cleanup)
            await runner.setup()
            if channel is not None:
                await web.SockSite(runner, sock).start()
                yield
                return
            await serve(runner, sock, tls)
            state.port = int(sock.getsockname()[1])
            log.info("admin listener on %s://%s:%d", scheme, settings.host, state.port)
            registry = app[METRICS].registry
            history = asyncio.ensure_future(keep(admin[HISTORY], registry.collect))
            opened.push_async_callback(closing.cancel, "the console's history", history)
            yield

    public.on_shutdown.append(draining)
    public.cleanup_ctx.append(listener)
    return state


def admin_socket(
    settings: Admin,
    public_address: tuple[str, int] | None = None,
    sock: socket.socket | None = None,
) -> socket.socket:
    """The admin listener's TCP socket, bound here unless `sock` was given bound; a busy
    port, or the public listener's address, is the operator's to fix."""
    if sock is None:
        try:
            sock = bind(settings.host, settings.port)
        except ListenError as exc:
            raise ConfigError(f"admin.port: {exc}") from None
    if public_address is not None and _same_address(sock, public_address):
        sock.close()
        raise ConfigError(
            f"admin.port: {settings.host}:{settings.port} is the public listener's "
            "address (listen.host, listen.port): the admin listener needs its own"
        )
    return sock


def _same_address(sock: socket.socket, public: tuple[str, int]) -> bool:
    """Whether `sock` took the public listener's address. The public socket is bound but
    listens only once the gateway serves, so the kernel lets the admin socket take its
    address (both reuse it) and the public listener then takes no connection at all:
    `localhost` and `127.0.0.1` are one address that the config's check cannot see."""
    host, port = sock.getsockname()[:2]
    return same_address((host, port), public)
