"""The admin listener holds its clients to the public listener's `limits`: the head of a
request (and a TLS handshake) within `request_header_timeout`, its body within
`request_body_timeout`, `keepalive_timeout` idle between requests, `client_write_timeout`
for a client that takes nothing, and `max_connections` open at once. Without them aiohttp
keeps an idle or half-sent connection open for ever. Its cuts are not counted in the public
listener's `idem_client_connections_cut`."""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.config.settings import Limits
from gateway.http.flow.incoming import refuse_slow_body
from gateway.http.server.limits import Connections
from gateway.http.server.site import GuardedSite

# Connections the kernel queues for the admin listener (aiohttp's default).
BACKLOG: Final = 128

ADMIN_CONNECTIONS: Final = web.AppKey("admin_connections", Connections)


def guarded_app(limits: Limits) -> web.Application:
    """An empty admin application whose requests keep to `limits` once `serve` serves it."""
    connections = Connections(limits, _uncounted)
    app = web.Application(
        handler_args={"keepalive_timeout": limits.keepalive_timeout},
        middlewares=[_timed(connections)],
    )
    app[ADMIN_CONNECTIONS] = connections

    async def stop_sweeping(app: web.Application) -> None:
        connections.close()

    app.on_cleanup.append(stop_sweeping)
    return app


async def serve(
    runner: web.AppRunner, sock: socket.socket, tls: ssl.SSLContext | None
) -> GuardedSite:
    """Serve `runner`'s application (made by `guarded_app`) on the bound socket `sock`."""
    site = GuardedSite(runner, sock, BACKLOG, runner.app[ADMIN_CONNECTIONS], tls)
    await site.start()
    return site


def _uncounted(reason: str) -> None:
    """The admin listener's cuts are its own, not the public listener's traffic."""


def _timed(connections: Connections) -> Middleware:
    @web.middleware
    async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
        connections.request_started(request.transport)  # its head is read: no header timeout
        try:
            if request.body_exists and not request.content.is_eof():
                try:  # read whole here (aiohttp keeps it for the handler), or not at all
                    async with asyncio.timeout(connections.limits.request_body_timeout):
                        await request.read()
                except TimeoutError:
                    why = "the request body did not arrive within limits.request_body_timeout"
                    return await refuse_slow_body(request, why)
            return await handler(request)
        finally:
            connections.request_ended(request.transport)

    return timed
