"""The httptools client's connection: an asyncio protocol that writes one request and parses its
answer with httptools (aiohttp's parser and leniencies), streaming the body with back-pressure."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import Callable
from types import TracebackType
from typing import Final, cast

import httptools

from gateway.core.headers import MAX_HEAD, header_text, unwritable_head
from gateway.upstream.base import UpstreamBroken, UpstreamTimeout

# Unread answer bytes past HIGH_WATER pause the socket until the reader is below LOW_WATER.
HIGH_WATER: Final = 256 * 1024
LOW_WATER: Final = 64 * 1024
_JOIN_MAX: Final = 64 * 1024  # bodies past this size are written after the head, not copied onto it
# Statuses whose answers never carry a body (RFC 9110 6.4.1).
_BODYLESS: Final = frozenset({204, 304})


class _Unsolicited(Exception):
    """A second answer began on a connection that carries one request at a time."""


class Connection(asyncio.Protocol):
    """One keep-alive connection, one exchange at a time; httptools fills its `PooledAnswer`."""

    _reading: PooledAnswer  # set by `send`: a parser callback reads it with no typing.cast call

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._closed_here = False
        self._parser = self._new_parser()
        self._answer: PooledAnswer | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self.idle_since = 0.0

    def _new_parser(self) -> httptools.HttpResponseParser:
        """llhttp as aiohttp sets it up for answers, lenient where real servers stray."""
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
        # Over TLS a body without length ends at close_notify, not a bare close (RFC 9112 9.8)
        self._cut = transport.get_extra_info("ssl_object") is not None

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
            return
        if not answer.head_done:  # past MAX_HEAD (1xx answers included): an endless head
            answer.head_size += len(data)
            if answer.head_size > MAX_HEAD:
                self._wake(UpstreamBroken(f"the answer's head passed {MAX_HEAD} bytes"))
                self.abort()

    def eof_received(self) -> bool:
        tls = cast(asyncio.Transport, self.transport).get_extra_info("ssl_object")
        with contextlib.suppress(ssl.SSLError):  # after close_notify, TLS reads b"" for good
            self._cut = self._cut and tls.read(1) != b""
        return False  # a half-closed connection is closed: the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        answer = self._answer
        if answer is None or answer.complete:
            return
        ended = answer.until_close and answer.head_done and not (self._closed_here or self._cut)
        if exc is None and ended:
            self._message_complete()  # a body without length ends where the upstream closes
        else:
            why = f": {exc!r}" if exc is not None else " without TLS close_notify" * self._cut
            self._wake(UpstreamBroken(f"the upstream closed the connection mid-answer{why}"))

    # httptools callbacks (a callback's exception stops the parser)

    def on_message_begin(self) -> None:
        answer = self._answer
        if answer is not None and answer.complete:
            raise _Unsolicited

    def on_status(self, status: bytes) -> None:
        self._reading.reason_bytes += status

    def on_header(self, name: bytes, value: bytes) -> None:
        answer = self._reading
        if answer.head_done:
            return  # a chunked body's trailer: not forwarded, as by aiohttp
        # llhttp strips the whitespace before a value, not after it (RFC 9110 5.5)
        answer.raw_headers.append((name, value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        answer = self._reading
        status = self._parser.get_status_code()
        if status < 200:  # informational (100 Continue, 103 Early Hints): the answer follows
            answer.reason_bytes = b""
            answer.raw_headers = []
            return
        if unwritable_head(answer.reason_bytes, answer.raw_headers):
            raise ValueError(
                "a control byte or an oversized field in the answer's head"
            )  # the parser stops
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
                answer.transfer_encoded = True
        # RFC 9112 6.3: a body with neither ends where the connection does.
        answer.until_close = not (length or chunked) and status not in _BODYLESS
        answer.keep_alive = self._parser.should_keep_alive() and not answer.until_close
        answer.head_done = True
        self._wake(None)

    def on_body(self, body: bytes) -> None:
        answer = self._reading
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
        answer = self._reading
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
        answer = self._reading
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

    def send(self, answer: PooledAnswer, head: bytes, body: bytes) -> None:
        transport = cast(asyncio.Transport, self.transport)
        self._answer = self._reading = answer
        if len(body) <= _JOIN_MAX:
            transport.write(head + body)
        else:
            transport.writelines((head, body))

    def finish(self) -> bool:
        """End the exchange; True when the connection can carry another one: its answer
        was read to the end, and all of its request was written (an upstream may answer
        before it has read the whole body; the next request would queue behind the rest)."""
        answer, self._answer = self._reading, None
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


class PooledAnswer:
    """The upstream's answer: its head under the names aiohttp's ClientResponse uses, and
    its body as it arrives. Leaving `async with` gives the connection back, or closes it
    when the answer was not read to its end."""

    def __init__(self, connection: Connection, give_back: Callable[[Connection], None]) -> None:
        self._connection = connection
        self._give_back = give_back
        self.status = 0
        self.reason = ""
        self.reason_bytes = b""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.content_length: int | None = None
        self.head_done = False
        self.head_size = 0  # bytes received before the head was complete
        self.complete = False
        self.keep_alive = False
        self.until_close = False
        self.transfer_encoded = False  # a Transfer-Encoding header: maybe a coding to undo
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
            self._give_back(self._connection)

    async def __aenter__(self) -> PooledAnswer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
