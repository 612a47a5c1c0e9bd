"""The one place that picks the client for a request: the lean one where it serves, else
aiohttp's. One pooled keep-alive client per origin, of each kind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Iterable
from typing import TypeGuard

import aiohttp
from multidict import CIMultiDict

from gateway.config.policy import Timeouts
from gateway.upstream import aio
from gateway.upstream.base import Answer
from gateway.upstream.lean import UpstreamPool, lean_enough


class Upstreams:
    """Per origin: aiohttp's session, and for a plain http:// origin the lean client's pool,
    which carries every request whose body is in hand (or that has none)."""

    def __init__(self, origins: Iterable[str], pool_size: int = 1024) -> None:
        self._pool_size = pool_size
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._pools: dict[str, UpstreamPool] = {}
        self.add(origins)

    def add(self, origins: Iterable[str]) -> None:
        """Clients for origins not seen before (a reloaded config); the others stay open."""
        for origin in origins:
            if origin in self._sessions:
                continue
            if lean_enough(origin):
                self._pools[origin] = UpstreamPool(origin, self._pool_size)
            self._sessions[origin] = aio.session(self._pool_size)

    async def send(
        self,
        origin: str,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        body: bytes | AsyncIterable[bytes] | None,
        timeouts: Timeouts,
    ) -> Answer:
        """Send `method target` (the path and query exactly as the client sent them) to
        `origin`; the answer's head must arrive within `timeouts.total`. A `body` of None
        sends none; an async iterable streams as it comes (aiohttp's client)."""
        pool = self._pools.get(origin)
        if pool is not None and method != "HEAD" and _in_hand(body):
            return await pool.request(
                method, target, headers.items(), body, timeouts.connect, timeouts.total
            )
        session = self._sessions[origin]
        return await aio.send(session, method, origin + target, headers, body, timeouts)

    def lean_for(self, origin: str, method: str, body: object) -> bool:
        """Whether `send` gives this request to the lean client: a plain http origin, a body
        in hand (or none), and not HEAD (whose answer announces a body it does not send)."""
        return origin in self._pools and method != "HEAD" and _in_hand(body)

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        await asyncio.gather(*(session.close() for session in self._sessions.values()))


def _in_hand(body: object) -> TypeGuard[bytes | None]:
    return body is None or isinstance(body, bytes)
