"""The gateway's two upstream clients, each opened alone against one origin (the httptools
client's pool, aiohttp's session), for the tests that run a case against both: `CLIENTS`
by name, each a context manager giving a `Send`."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

from multidict import CIMultiDict

from gateway.config.policy import Timeouts
from gateway.upstream import aiohttp_client
from gateway.upstream.base import Answer
from gateway.upstream.httptools_client import UpstreamPool

Send = Callable[[str, str, bytes | None, float], Any]


@contextlib.asynccontextmanager
async def _httptools(origin: str, tls: ssl.SSLContext | None) -> AsyncIterator[Send]:
    pool = UpstreamPool(origin, 8, tls)

    async def send(method: str, target: str, body: bytes | None, total: float) -> Answer:
        return await pool.request(method, target, [("X-A", "1")], body, 1.0, total)

    try:
        yield send
    finally:
        pool.close()


@contextlib.asynccontextmanager
async def _aiohttp(origin: str, tls: ssl.SSLContext | None) -> AsyncIterator[Send]:
    session = aiohttp_client.session(8, tls or True)

    async def send(method: str, target: str, body: bytes | None, total: float) -> Answer:
        timeouts = Timeouts(connect=1.0, total=total, read=total)
        headers = CIMultiDict({"X-A": "1"})
        return await aiohttp_client.send(session, method, origin + target, headers, body, timeouts)

    try:
        yield send
    finally:
        await session.close()


CLIENTS = {"httptools": _httptools, "aiohttp": _aiohttp}
