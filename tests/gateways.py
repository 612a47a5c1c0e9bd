"""In-process gateways for the tests: the settings of a one-route gateway, the server that
serves one as the gateway does, and what the fixtures of conftest.py that start gateways and
their admin listeners give (`make_gateway`, `make_admin`)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from gateway.config.loading import settings_from_dict
from gateway.config.settings import Settings
from gateway.http.server.site import start_site

# `await make_gateway(settings=None, url=None, blob=None, redis=None, **route)`: a started
# gateway's client (`gateway_settings` of the counting upstream, unless `settings` are given).
GatewayFactory = Callable[..., Awaitable[TestClient]]
# `await make_admin(gateway_client, token=ADMIN_TOKEN, state=None)`: its admin listener's client.
AdminFactory = Callable[..., Awaitable[TestClient]]
ADMIN_TOKEN = "test-admin-token-0123456789"


def gateway_settings(
    origin: str,
    redis: dict[str, Any] | None = None,
    blob: dict[str, Any] | None = None,
    upstream_tls: dict[str, Any] | None = None,
    **route: Any,
) -> Settings:
    """One route, `api`, protecting every path of `origin`; `route` overrides its fields,
    `redis` the Redis settings (the breaker stays out of the way unless a test sets it; the
    records are written in format 1, as on a Redis other gateways share, unless it sets
    `record_format`), `blob` the blob store's and `upstream_tls` how https upstreams are reached."""
    raw: dict[str, Any] = {
        "upstream": origin,
        "redis": {"breaker": {"failures": 1000}, "record_format": 1, **(redis or {})},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin, **route}],
    }
    if blob is not None:
        raw["blob"] = blob
    if upstream_tls is not None:
        raw["upstream_tls"] = upstream_tls
    return settings_from_dict(raw)


class GatewayServer(TestServer):
    """aiohttp's test server, serving as the gateway does (`gateway.http.server.site.start_site`):
    each request straight to its handler, connections guarded by the limits, aiohttp's own
    error answers as problem+json, closing lingering after them."""

    async def start_server(self, loop: asyncio.AbstractEventLoop | None = None, **_: Any) -> None:
        if self.runner:
            return
        self._loop = loop
        self.runner = await self._make_runner(handler_cancellation=True)
        await self.runner.setup()
        sock = self.socket_factory(self.host, 0, socket.AF_INET)
        self.port = sock.getsockname()[1]
        await start_site(self.runner, sock, backlog=128)
        self.scheme = "http"
        self._root = URL(f"http://{self.host}:{self.port}")
