"""aiohttp's client behind the `Answer` interface: for HEAD, request bodies that stream in as
the client sends them, and origins the httptools client does not serve."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import ssl
from collections.abc import AsyncIterable, Mapping
from types import TracebackType
from typing import Any, Final

import aiohttp
from aiohttp.connector import TCPConnector
from mypy_extensions import mypyc_attr
from yarl import URL

from gateway.config.policy import Timeouts
from gateway.core.headers import MAX_FIELDS, MAX_HEAD, header_text, unwritable_head
from gateway.upstream.base import (
    Answer,
    SendGuard,
    UpstreamBroken,
    UpstreamTimeout,
    UpstreamTooLate,
    UpstreamUnsent,
)
from gateway.upstream.codings import coded, decoded
from gateway.upstream.httptools_client import TLS_SHUTDOWN_SECONDS

# Failures that mean the request was never written: aiohttp never resends (see `session`).
# A refused certificate or a failed handshake is a ClientConnectorError too.
_UNSENT: Final = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, aiohttp.InvalidURL)


# The guard of the request this task is sending (`send`): aiohttp hands a connector the request
# alone, so the guard rides along in the task's context.
_GUARD: Final[contextvars.ContextVar[SendGuard | None]] = contextvars.ContextVar(
    "upstream_send_guard", default=None
)


# The base named from its own module: compiled, one reached as `aiohttp.TCPConnector` left its
# module (aiohttp.connector) undeclared in the C, and the wheel did not build.
@mypyc_attr(native_class=False)  # a subclass of aiohttp's (Python) connector
class _GuardedConnector(TCPConnector):
    """aiohttp's connector, asking the request's `SendGuard` once the connection is in hand:
    from there to the first byte written, aiohttp does not wait on anything."""

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        connection = await super().connect(req, traces, timeout)
        guard = _GUARD.get()
        if guard is not None and not guard.may_send():
            connection.release()  # unused: back to the pool
            raise UpstreamTooLate("too late to send: the claim may be another's by now")
        return connection


def session(pool_size: int, tls: ssl.SSLContext | bool = True) -> aiohttp.ClientSession:
    """A pooled keep-alive session that sends exactly what it is given; `tls` is the context
    for https origins (True: aiohttp's default, the system's trust store)."""
    connector = _GuardedConnector(limit=pool_size, limit_per_host=pool_size, ssl=tls)
    # A closing TLS connection waits for the upstream's close_notify as the httptools client's
    # does, not asyncio's 30 s. The parameter is deprecated, the attribute private:
    # tests/test_upstream_tls_hostile.py fails when aiohttp stops reading it.
    connector._ssl_shutdown_timeout = TLS_SHUTDOWN_SECONDS
    made = aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,  # bodies pass through and are recorded byte for byte
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        cookie_jar=aiohttp.DummyCookieJar(),
        # the httptools client's limits (`unwritable_head` checks the whole head's), not 8190
        # bytes and 128 lines: a keyed answer recorded is one a pass-through passes on
        max_line_size=MAX_HEAD,
        max_field_size=MAX_HEAD,
        max_headers=MAX_FIELDS,
    )
    # aiohttp resends PUT (and other "idempotent" methods) once when a kept-alive connection
    # drops: an upstream could run the operation twice inside one claim. A private attribute:
    # tests/test_private_apis.py fails when aiohttp stops reading it.
    made._retry_connection = False
    return made


def _translated(exc: BaseException) -> BaseException:
    if isinstance(exc, _UNSENT):
        return UpstreamUnsent(str(exc) or type(exc).__name__)
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(str(exc) or "the upstream did not answer in time")
    return UpstreamBroken(str(exc) or type(exc).__name__)


@functools.lru_cache(maxsize=256)
def client_timeout(timeouts: Timeouts) -> aiohttp.ClientTimeout:
    """aiohttp's own timeouts: only the connection (a pooled one included), which fails as
    ConnectionTimeoutError before anything is sent. The head and the body are timed here.
    Not aiohttp's `sock_read`: its clock restarts on any byte the upstream sends after a
    complete answer (a stray CRLF), and it then fails the finished answer's stream, or the
    next request on that pooled connection, unsent."""
    return aiohttp.ClientTimeout(
        total=None, connect=timeouts.connect, sock_connect=timeouts.connect
    )


class AioAnswer:
    """An aiohttp ClientResponse as an `Answer`."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        # aiohttp reads the reason as UTF-8 with surrogateescape: its bytes, back as Latin-1.
        self.reason = header_text((response.reason or "").encode("utf-8", "surrogateescape"))
        self.raw_headers = list(response.raw_headers)
        self.content_length = response.content_length

    async def read_chunk(self, timeout: float) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self._response.content.readany()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _translated(exc) from exc

    async def __aenter__(self) -> AioAnswer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._response.release()


async def send(
    client: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes | AsyncIterable[bytes] | None,
    timeouts: Timeouts,
    guard: SendGuard | None = None,
) -> Answer:
    """Send the request; the answer's head must arrive within `timeouts.total`. The URL is
    marked encoded, or aiohttp would normalise it (`/a/../b%7E` to `/b~`). `guard` is asked
    once a connection is in hand (`_GuardedConnector`): UpstreamTooLate when it says no."""
    _GUARD.set(guard)  # this task's own context: a request of another task never sees it
    try:
        async with asyncio.timeout(timeouts.total):
            response = await client.request(
                method,
                URL(url, encoded=True),
                headers=headers,
                data=body,
                timeout=client_timeout(timeouts),
                allow_redirects=False,
            )
    except UpstreamTooLate:
        raise
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise _translated(exc) from exc
    answer = AioAnswer(response)
    if unwritable_head(answer.reason.encode("latin-1"), answer.raw_headers):
        response.close()
        raise UpstreamBroken("malformed answer: a control byte or an oversized field in its head")
    return decoded(answer, coded(answer.raw_headers))
