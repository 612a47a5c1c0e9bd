"""A lean HTTP/1.1 client for the claimed call: one request, one answer, pooled keep-alive.

The claimed call is the gateway's hot path, and aiohttp's ClientSession spends more CPU on
one request than all of the gateway's own work on it (loadtest/RESULTS.md). This client does
only what that call needs: a request whose body is already in memory, sent with one write,
and an answer parsed by httptools (llhttp, the parser aiohttp uses too) and streamed with
back-pressure. It never resends a request: a failure before the request is written raises
`UpstreamUnsent`; any later one leaves the outcome unknown. An https:// origin is reached
over TLS on the asyncio transport, with the `ssl.SSLContext` aiohttp's client is given too:
the handshake, certificate checks included, completes before the connection is handed out,
so a refused certificate is a failure before sending. Only bodies in hand; `Upstreams` sends
everything else (HEAD, a body that streams in) through aiohttp."""

from __future__ import annotations

import asyncio
import collections
import functools
import ssl
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from gateway.config.tls import UpstreamTls
from gateway.upstream.base import Answer, SendGuard, UpstreamTooLate, UpstreamUnsent
from gateway.upstream.codings import coded, decoded
from gateway.upstream.httptools_conn import Connection, PooledAnswer

# Idle connections older than this are closed rather than used, as aiohttp does: the
# older one is, the likelier the upstream is closing it just as a request goes out.
KEEPALIVE_SECONDS = 15.0  # not Final: tests shorten it (tests/test_upstream_client.py)
# A closing TLS connection waits this long for the upstream's close_notify, not asyncio's
# 30 s: an upstream that never answers one would pin a socket per request meanwhile.
TLS_SHUTDOWN_SECONDS: Final = 2.0
_FIELD: Final = "\r\n%s: %s".__mod__  # one header line of the request's head


class UpstreamPool:
    """Keep-alive connections to one http:// or https:// origin, at most `limit` in use at
    once. `tls` is the context for an https origin (None: the system's trust store)."""

    def __init__(self, origin: str, limit: int, tls: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(origin)
        if not httptools_serves(origin):
            raise ValueError(f"{origin!r} is not a plain http or https origin")
        assert parts.hostname is not None
        self._host = parts.hostname
        secure = parts.scheme == "https"
        default_port = 443 if secure else 80
        self._port = parts.port or default_port
        self._tls = (tls or default_tls()) if secure else None
        # The name the certificate must carry, and SNI: as aiohttp sends it (no final dot).
        self._server_hostname = parts.hostname.rstrip(".") if secure else None
        self._tls_shutdown = TLS_SHUTDOWN_SECONDS if secure else None
        self._prefix = parts.path.rstrip("/")  # an origin may name a base path
        # As aiohttp writes it: the port only when it is not the scheme's default one.
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        self._host_header = host if self._port == default_port else f"{host}:{self._port}"
        self._idle: collections.deque[Connection] = collections.deque()  # oldest first
        self._slots = asyncio.Semaphore(limit)
        self._closed = False

    async def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
        connect_timeout: float | None,
        head_timeout: float,
        guard: SendGuard | None = None,
    ) -> Answer:
        """Send the request and wait for the answer's head. `connect_timeout` bounds the
        wait for a connection (a pooled one included), `head_timeout` the wait after sending.
        A `body` of None sends no body and no Content-Length (a GET's usual form). `guard`
        is asked once the connection is in hand, right before the write: UpstreamTooLate
        when it says no, the connection kept for the next request."""
        try:
            size = None if body is None else len(body)
            head = self._head(method, self._prefix + target, headers, size)
        except ValueError as exc:
            raise UpstreamUnsent(str(exc)) from None
        connection = await self._connection(connect_timeout)
        if guard is not None and not guard.may_send():
            self._put_back(connection)
            raise UpstreamTooLate("too late to send: the claim may be another's by now")
        answer = PooledAnswer(connection, self.give_back)
        try:
            connection.send(answer, head, body or b"")
            deadline = connection.clock() + head_timeout
            while not answer.head_done:
                await connection.wait(deadline)
        except BaseException:
            answer.release()
            raise
        if answer.transfer_encoded:  # rare: only then are the headers looked at again
            return decoded(answer, coded(answer.raw_headers))
        return answer

    def give_back(self, connection: Connection) -> None:
        if connection.finish():
            if self._closed:
                connection.close()
            else:
                now = connection.clock()
                connection.idle_since = now
                self._idle.append(connection)
                # The pool shrinks back after a burst, oldest first.
                while self._idle[0].idle_since < now - KEEPALIVE_SECONDS:
                    self._idle.popleft().close()
        self._slots.release()

    def _put_back(self, connection: Connection) -> None:
        """A connection taken and not used: idle again, its slot free."""
        if self._closed or not connection.usable():
            connection.close()
        else:
            connection.idle_since = connection.clock()
            self._idle.append(connection)
        self._slots.release()

    def close(self) -> None:
        """Close the idle connections; those in use close when their answers are released."""
        self._closed = True
        while self._idle:
            self._idle.pop().close()

    def _head(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], size: int | None
    ) -> bytes:
        fields = list(map(_FIELD, headers))  # each "\r\nName: value", formatted in C
        if size is not None:
            fields.append(f"\r\nContent-Length: {size}")
        text = "".join(fields)
        lines = len(fields)
        if "\r\nhost:" not in text.lower():  # no Host of the client's (preserve_host)
            text = f"\r\nHost: {self._host_header}{text}"
            lines += 1
        head = f"{method} {target} HTTP/1.1{text}\r\n\r\n"
        # Every line break is one this function put there: none hides in a name or value.
        breaks = lines + 2  # and the request line's and the empty line's
        if head.count("\n") != breaks or head.count("\r") != breaks:
            raise ValueError("a header or the request target holds a line break")
        return head.encode("utf-8", "surrogateescape")  # the client's bytes, as they came

    async def _connection(self, timeout: float | None) -> Connection:
        """A slot and a connection in it: the newest idle one, or a new one. Waiting for
        both counts towards one `timeout`, as in aiohttp."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        if self._slots.locked():
            try:
                async with asyncio.timeout_at(deadline):
                    await self._slots.acquire()
            except TimeoutError:
                raise UpstreamUnsent(f"no free connection to {self._where()}") from None
        else:
            await self._slots.acquire()  # free: returns at once
        try:
            fresh_since = loop.time() - KEEPALIVE_SECONDS
            while self._idle:
                connection = self._idle.pop()
                if connection.usable() and connection.idle_since > fresh_since:
                    return connection
                connection.close()
            try:  # over TLS: the handshake is part of connecting (ssl.SSLError is an OSError)
                async with asyncio.timeout_at(deadline):
                    _, fresh = await loop.create_connection(
                        Connection,
                        self._host,
                        self._port,
                        ssl=self._tls,
                        server_hostname=self._server_hostname,
                        ssl_shutdown_timeout=self._tls_shutdown,
                    )
            except (OSError, TimeoutError) as exc:
                raise UpstreamUnsent(f"cannot connect to {self._where()}: {exc!r}") from None
            return fresh
        except BaseException:
            self._slots.release()
            raise

    def _where(self) -> str:
        return f"{self._host}:{self._port}"


@functools.cache
def default_tls() -> ssl.SSLContext:
    """The context for https origins when none is given: the system's trust store."""
    return UpstreamTls().context()


def httptools_serves(origin: str) -> bool:
    """Whether the httptools client can serve `origin`: http or https, no credentials or query."""
    parts = urlsplit(origin)
    return (
        parts.scheme in ("http", "https")
        and parts.hostname is not None
        and parts.username is None
        and not parts.query
        and not parts.fragment
    )
