"""A lean HTTP/1.1 client for the claimed call: one request, one answer, pooled keep-alive.

The claimed call is the gateway's hot path, and aiohttp's ClientSession spends more CPU on
one request than all of the gateway's own work on it (loadtest/RESULTS.md). This client does
only what that call needs: a request whose body is already in memory, sent with one write,
and an answer parsed by httptools (llhttp, the parser aiohttp uses too) and streamed with
back-pressure. It never resends a request: a failure before the request is written raises
`UpstreamUnsent`; any later one leaves the outcome unknown. Only plain http:// origins and
bodies in hand; `Upstreams` sends everything else (https, HEAD, a body that streams in)
through aiohttp.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Iterable
from typing import cast
from urllib.parse import urlsplit

import aiohttp
import httptools

# Unread answer bytes past HIGH_WATER pause the socket until the reader is below LOW_WATER.
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
# Bodies past this size are written after the head rather than copied onto it.
_JOIN_MAX = 64 * 1024
# Idle connections older than this are closed rather than used, as aiohttp does: the
# older one is, the likelier the upstream is closing it just as a request goes out.
KEEPALIVE_SECONDS = 15.0
# Statuses whose answers never carry a body (RFC 9110 6.4.1).
_BODYLESS = frozenset({204, 304})


class UpstreamUnsent(aiohttp.ClientConnectionError):
    """The request was never written: the upstream cannot have run it."""


class UpstreamBroken(aiohttp.ClientConnectionError):
    """The connection broke, or the answer was malformed, after the request was written."""


class UpstreamTimeout(TimeoutError):
    """The answer's head, or its next body bytes, did not arrive in time."""


class _Unsolicited(Exception):
    """A second answer began on a connection that carries one request at a time."""


def header_text(raw: bytes) -> str:
    """Header bytes (or a reason phrase) as the text aiohttp writes back as UTF-8: valid
    UTF-8 (the usual case beyond ASCII, e.g. a file name) round-trips byte for byte; other
    bytes read as Latin-1."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


class _Connection(asyncio.Protocol):
    """One keep-alive connection: an asyncio protocol feeding httptools, one exchange at a
    time. The parser's callbacks fill the current `UpstreamAnswer`."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._closed_here = False
        self._parser = self._new_parser()
        self._answer: UpstreamAnswer | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self.idle_since = 0.0

    def _new_parser(self) -> httptools.HttpResponseParser:
        """llhttp as aiohttp sets it up for answers: lenient where real servers stray (a
        control byte in a header value, a bare LF, spaces after a chunk size)."""
        parser = httptools.HttpResponseParser(self)
        parser.set_dangerous_leniencies(
            lenient_headers=True,
            lenient_optional_cr_before_lf=True,
            lenient_spaces_after_chunk_size=True,
        )
        return parser

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        answer = self._answer
        if answer is None or answer.complete:
            if data.strip(b"\r\n"):  # nobody asked: whatever it is, the connection is unusable
                self.abort()
            return  # a stray CRLF after an answer is tolerated, as by aiohttp
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if not answer.complete:
                self._wake(UpstreamBroken(f"malformed answer: {exc!r}"))
            self.abort()

    def eof_received(self) -> bool:
        return False  # a half-closed connection is closed: the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        answer = self._answer
        if answer is None or answer.complete:
            return
        if exc is None and answer.until_close and answer.head_done and not self._closed_here:
            self._message_complete()  # a body without length ends where the upstream closes
        else:
            why = f": {exc!r}" if exc is not None else ""
            self._wake(UpstreamBroken(f"the upstream closed the connection mid-answer{why}"))

    # httptools callbacks (a callback's exception stops the parser)

    def on_message_begin(self) -> None:
        answer = self._answer
        if answer is not None and answer.complete:
            raise _Unsolicited

    def on_status(self, status: bytes) -> None:
        cast(UpstreamAnswer, self._answer).reason_bytes += status

    def on_header(self, name: bytes, value: bytes) -> None:
        answer = cast(UpstreamAnswer, self._answer)
        if answer.head_done:
            return  # a chunked body's trailer: not forwarded, as by aiohttp
        if b"\x00" in value:  # refused by aiohttp too, which the lenient parser lets through
            raise ValueError("a NUL byte in a header value")
        # llhttp strips the whitespace before a value, not after it (RFC 9110 5.5)
        answer.raw_headers.append((name, value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        answer = cast(UpstreamAnswer, self._answer)
        status = self._parser.get_status_code()
        if status < 200:  # informational (100 Continue, 103 Early Hints): the answer follows
            answer.reason_bytes = b""
            answer.raw_headers = []
            return
        answer.status = status
        answer.reason = header_text(answer.reason_bytes)
        length = chunked = False
        for name, value in answer.raw_headers:
            lowered = name.lower()
            if lowered == b"content-length":
                answer.content_length = int(value)
                length = True
            elif lowered == b"transfer-encoding":  # chunked only when it is the last coding
                chunked = value.rsplit(b",", 1)[-1].strip().lower() == b"chunked"
        # RFC 9112 6.3: a body with neither ends where the connection does.
        answer.until_close = not (length or chunked) and status not in _BODYLESS
        answer.keep_alive = self._parser.should_keep_alive() and not answer.until_close
        answer.head_done = True
        self._wake(None)

    def on_body(self, body: bytes) -> None:
        answer = cast(UpstreamAnswer, self._answer)
        if not answer.head_done:
            return  # an informational answer may not have a body: dropped, as by aiohttp
        answer.buffer.append(body)
        answer.buffered += len(body)
        if answer.buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake(None)

    def on_message_complete(self) -> None:
        answer = self._answer
        if answer is not None and answer.head_done:  # not the end of an informational one
            self._message_complete()

    # the exchange

    def _message_complete(self) -> None:
        answer = cast(UpstreamAnswer, self._answer)
        if answer.error is None:  # an answer that failed stays failed
            answer.complete = True
        self._wake(None)

    def _wake(self, exc: BaseException | None) -> None:
        """Tell a waiting reader there is news: more of the answer, or `exc` (kept for
        a reader that comes later)."""
        if exc is not None and self._answer is not None:
            self._answer.error = exc
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def _time_out(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # the bytes came in the same loop pass: the wait is over
            return
        self._wake(UpstreamTimeout("the upstream sent nothing more in time"))
        self.abort()

    async def wait(self, deadline: float) -> None:
        """Until the parser has more of the answer; at `deadline` the connection dies."""
        answer = cast(UpstreamAnswer, self._answer)
        if answer.error is not None:
            raise answer.error
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_at(deadline, self._time_out, waiter)
        try:
            await waiter
        finally:
            timer.cancel()

    def clock(self) -> float:
        return self._loop.time()

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def send(self, answer: UpstreamAnswer, head: bytes, body: bytes) -> None:
        transport = cast(asyncio.Transport, self.transport)
        self._answer = answer
        if len(body) <= _JOIN_MAX:
            transport.write(head + body)
        else:
            transport.writelines((head, body))

    def finish(self) -> bool:
        """End the exchange; True when the connection can carry another one: its answer
        was read to the end, and all of its request was written (an upstream may answer
        before it has read the whole body; the next request would queue behind the rest)."""
        answer, self._answer = cast(UpstreamAnswer, self._answer), None
        self._waiter = None
        unsent = self.transport.get_write_buffer_size() if self.transport is not None else 0
        if answer.complete and answer.keep_alive and not unsent and self.usable():
            self.resume()
            self._parser = self._new_parser()
            return True
        if answer.complete and not unsent:
            self.close()
        else:
            self.abort()  # a failed or half-sent exchange: what is unsent is dropped
        return False

    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.closed = True
        self._closed_here = True  # so the close is never read as the end of an unframed body
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close at once, dropping whatever is still to be written (a failed exchange)."""
        self.closed = True
        self._closed_here = True
        if self.transport is not None:
            self.transport.abort()


class UpstreamAnswer(contextlib.AbstractAsyncContextManager["UpstreamAnswer"]):
    """The upstream's answer: its head under the names aiohttp's ClientResponse uses, and
    its body as it arrives. Leaving `async with` gives the connection back, or closes it
    when the answer was not read to its end."""

    def __init__(self, connection: _Connection, pool: UpstreamPool) -> None:
        self._connection = connection
        self._pool = pool
        self.status = 0
        self.reason = ""
        self.reason_bytes = b""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.content_length: int | None = None
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.until_close = False
        self.buffer: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.error: BaseException | None = None
        self._released = False

    async def read_chunk(self, timeout: float) -> bytes:
        """The next body bytes, or b"" at the end; waits at most `timeout` for them."""
        while not self.buffer:
            if self.complete:
                return b""
            await self._connection.wait(self._connection.clock() + timeout)
        chunk = self.buffer.popleft()
        self.buffered -= len(chunk)
        if self.buffered < LOW_WATER:
            self._connection.resume()
        return chunk

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._pool.give_back(self._connection)

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


class UpstreamPool:
    """Keep-alive connections to one plain http:// origin, at most `limit` in use at once."""

    def __init__(self, origin: str, limit: int) -> None:
        parts = urlsplit(origin)
        if not lean_enough(origin):
            raise ValueError(f"{origin!r} is not a plain http origin")
        assert parts.hostname is not None
        self._host = parts.hostname
        self._port = parts.port or 80
        self._prefix = parts.path.rstrip("/")  # an origin may name a base path
        # As aiohttp writes it: the port only when it is not the default one.
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        self._host_header = host if self._port == 80 else f"{host}:{self._port}"
        self._idle: collections.deque[_Connection] = collections.deque()  # oldest first
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
    ) -> UpstreamAnswer:
        """Send the request and wait for the answer's head. `connect_timeout` bounds the
        wait for a connection (a pooled one included), `head_timeout` the wait after sending.
        A `body` of None sends no body and no Content-Length (a GET's usual form)."""
        try:
            size = None if body is None else len(body)
            head = self._head(method, self._prefix + target, headers, size)
        except ValueError as exc:
            raise UpstreamUnsent(str(exc)) from None
        connection = await self._connection(connect_timeout)
        answer = UpstreamAnswer(connection, self)
        try:
            connection.send(answer, head, body or b"")
            deadline = connection.clock() + head_timeout
            while not answer.head_done:
                await connection.wait(deadline)
        except BaseException:
            answer.release()
            raise
        return answer

    def give_back(self, connection: _Connection) -> None:
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

    def close(self) -> None:
        """Close the idle connections; those in use close when their answers are released."""
        self._closed = True
        while self._idle:
            self._idle.pop().close()

    def _head(
        self, method: str, target: str, headers: Iterable[tuple[str, str]], size: int | None
    ) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        lines.extend(f"{name}: {value}" for name, value in headers)
        if size is not None:
            lines.append(f"Content-Length: {size}")
        head = "\r\n".join(lines) + "\r\n\r\n"
        # Every line break is one this function put there: none hides in a name or value.
        if head.count("\n") != len(lines) + 1 or head.count("\r") != len(lines) + 1:
            raise ValueError("a header or the request target holds a line break")
        return head.encode("utf-8", "surrogateescape")  # the client's bytes, as they came

    async def _connection(self, timeout: float | None) -> _Connection:
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
            try:
                async with asyncio.timeout_at(deadline):
                    _, fresh = await loop.create_connection(_Connection, self._host, self._port)
            except (OSError, TimeoutError) as exc:
                raise UpstreamUnsent(f"cannot connect to {self._where()}: {exc!r}") from None
            return fresh
        except BaseException:
            self._slots.release()
            raise

    def _where(self) -> str:
        return f"{self._host}:{self._port}"


def lean_enough(origin: str) -> bool:
    """Whether the lean client can serve `origin`: plain http, no credentials or query."""
    parts = urlsplit(origin)
    return (
        parts.scheme == "http" and parts.hostname is not None and parts.username is None
        and not parts.query and not parts.fragment
    )  # fmt: skip
