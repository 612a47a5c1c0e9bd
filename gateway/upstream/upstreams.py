"""The one place that picks the client for a request: the lean one where it serves, else
aiohttp's. One pooled keep-alive client per origin, of each kind."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterable, Awaitable, Iterable
from typing import TypeGuard

import aiohttp
from multidict import CIMultiDict

from gateway.config.policy import Timeouts
from gateway.upstream import aiohttp_client
from gateway.upstream.base import Answer, SendGuard
from gateway.upstream.httptools_client import UpstreamPool, default_tls, httptools_serves


class Outbound:
    """A request on its way to an upstream: `method` and `target` (the path and query exactly
    as the client sent them) for `origin`, its headers, and its body (None: none; an async
    iterable streams as it comes, with aiohttp's client). Its answer's head must arrive
    within `timeouts.total`. A claimed call carries its `guard`, asked just before the
    first byte goes (None: always sent). A plain class, made per request: compiled, a
    dataclass's __init__ runs as Python."""

    def __init__(
        self,
        origin: str,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        body: bytes | AsyncIterable[bytes] | None,
        timeouts: Timeouts,
        guard: SendGuard | None = None,
    ) -> None:
        self.origin = origin
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.timeouts = timeouts
        self.guard = guard


class Upstreams:
    """Per origin: aiohttp's session, and the httptools client's pool, which carries every request
    whose body is in hand (or that has none). Both reach https origins with the one `tls`
    context (None: the system's trust store), so they trust and show the same certificates."""

    def __init__(
        self, origins: Iterable[str], pool_size: int = 1024, tls: ssl.SSLContext | None = None
    ) -> None:
        self._pool_size = pool_size
        self._tls = tls or default_tls()
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._pools: dict[str, UpstreamPool] = {}
        self.add(origins)

    def add(self, origins: Iterable[str]) -> None:
        """Clients for origins not seen before (a reloaded config); the others stay open."""
        for origin in origins:
            if origin in self._sessions:
                continue
            if httptools_serves(origin):
                self._pools[origin] = UpstreamPool(origin, self._pool_size, self._tls)
            self._sessions[origin] = aiohttp_client.session(self._pool_size, self._tls)

    def send(self, out: Outbound) -> Awaitable[Answer]:
        """Send `out` to its origin: with the httptools client where it serves (an http(s)
        origin, a body in hand or none, and not HEAD, whose answer announces a body it does
        not send), else with aiohttp's. The chosen client's call itself is awaited: no frame
        of this choice stays in between."""
        body = out.body
        pool = self._pools.get(out.origin)
        if pool is not None and out.method != "HEAD" and _in_hand(body):
            connect, total = out.timeouts.connect, out.timeouts.total
            headers = out.headers.items()
            return pool.request(out.method, out.target, headers, body, connect, total, out.guard)
        session = self._sessions[out.origin]
        url = out.origin + out.target
        return aiohttp_client.send(
            session, out.method, url, out.headers, body, out.timeouts, out.guard
        )

    @property
    def tls(self) -> ssl.SSLContext:
        """The context both clients reach https origins with."""
        return self._tls

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        await asyncio.gather(*[session.close() for session in self._sessions.values()])


def _in_hand(body: object) -> TypeGuard[bytes | None]:
    return body is None or isinstance(body, bytes)
