"""The gateway's two upstream clients, each opened alone against one origin (the httptools
client's pool, aiohttp's session), for the tests that run a case against both: `CLIENTS`
by name, each a context manager giving a `Send` (its last argument, optional, the request's
`SendGuard`); a connection must come within `connect` seconds."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

from multidict import CIMultiDict

from gateway.config.policy import Timeouts
from gateway.upstream import aiohttp_client
from gateway.upstream.base import Answer, SendGuard
from gateway.upstream.httptools_client import UpstreamPool

Send = Callable[..., Any]  # (method, target, body, total[, guard]) -> Answer


@contextlib.asynccontextmanager
async def _httptools(
    origin: str, tls: ssl.SSLContext | None, connect: float = 1.0
) -> AsyncIterator[Send]:
    pool = UpstreamPool(origin, 8, tls)

    async def send(
        method: str, target: str, body: bytes | None, total: float, guard: SendGuard | None = None
    ) -> Answer:
        return await pool.request(method, target, [("X-A", "1")], body, connect, total, guard)

    try:
        yield send
    finally:
        pool.close()


@contextlib.asynccontextmanager
async def _aiohttp(
    origin: str, tls: ssl.SSLContext | None, connect: float = 1.0
) -> AsyncIterator[Send]:
    session = aiohttp_client.session(8, tls or True)

    async def send(
        method: str, target: str, body: bytes | None, total: float, guard: SendGuard | None = None
    ) -> Answer:
        timeouts = Timeouts(connect=connect, total=total, read=total)
        headers = CIMultiDict({"X-A": "1"})
        url = origin + target
        return await aiohttp_client.send(session, method, url, headers, body, timeouts, guard)

    try:
        yield send
    finally:
        await session.close()


CLIENTS = {"httptools": _httptools, "aiohttp": _aiohttp}
