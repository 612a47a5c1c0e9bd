"""What one client connection may hold, enforced where aiohttp has no setting for it.

aiohttp's server has no header-read timeout, no write timeout and no cap on connections
(docs: PITFALLS). Each accepted connection's protocol is wrapped in `_Guarded`, which passes
every event through to aiohttp's own and adds a head deadline, a write timer and a count:

- the head of a request must be complete within `request_header_timeout` of the connection's
  start, or of the first byte after the previous request (slow headers: closed). Checked by
  one sweep per server a few times per timeout rather than a timer per request: a request
  pays for one clock reading;
- a client whose socket takes none of what is written to it for `client_write_timeout` (the
  transport stays above its high-water mark) is cut, whatever the writer was;
- past `max_connections` open client connections, a new one is answered 503 and closed.

Idle time between requests is aiohttp's own keep-alive timeout (`keepalive_timeout`, which
also runs from the connection's start: a head is cut by whichever of the two ends first);
the request body's timeouts are applied as it is read (`http.flow.incoming.TimedBody`).
"""

from __future__ import annotations

import asyncio
import math
import resource
import socket
import struct
import sys
from collections.abc import Callable
from http import HTTPStatus
from typing import Final, cast

from gateway.config.settings import Limits
from gateway.http.answers.problems import PROBLEM_TYPE, TOO_MANY_CONNECTIONS, Problem, problem_body


def _written_problem(kind: Problem) -> bytes:
    """A problem+json answer as bytes on the wire, for a connection aiohttp never sees."""
    body = problem_body(kind)
    head = [f"HTTP/1.1 {kind.status} {HTTPStatus(kind.status).phrase}"]
    head.append(f"Content-Type: {PROBLEM_TYPE}")
    head += [f"{name}: {value}" for name, value in kind.headers.items()]
    head += ["Connection: close", f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(head).encode() + body


# The answer to a connection past `max_connections`: written at once, then closed.
BUSY: Final = _written_problem(TOO_MANY_CONNECTIONS)
# `head_since` of a connection that is not reading a head: never overdue. BETWEEN requests
# the next byte starts a head; NOT_READING while a request runs (its body is not a head).
NOT_READING: Final = math.inf
BETWEEN: Final = sys.float_info.max
_RESET: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, zero seconds: close() sends a reset
# How long a connection closing on an error answer drains what its client still sends.
LINGER: Final = 5.0  # nginx's lingering_timeout


# File descriptors a gateway needs besides its client connections: Redis, upstream pools,
# blobs, the journal, the admin listener.
SPARE_FILES: Final = 256


def fit_open_files(limits: Limits) -> str | None:
    """Raise the soft limit on open files to what `max_connections` needs, as far as the hard
    limit allows; a warning to log when it stays short (the kernel then refuses connections
    before the gateway's limit answers them)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = limits.max_connections + SPARE_FILES
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        soft = raised
    if soft != resource.RLIM_INFINITY and soft < needed:
        return (
            f"open files are limited to {soft}: fewer than limits.max_connections "
            f"({limits.max_connections}) + {SPARE_FILES}; raise `ulimit -n` or lower it"
        )
    return None


class Connections:
    """The open client connections of one server, and what each may hold."""

    def __init__(self, limits: Limits, cut: Callable[[str], None]) -> None:
        self.limits = limits
        self.cut = cut  # counts a connection closed by a limit, by reason
        self._open: dict[asyncio.BaseTransport, _Guarded] = {}
        # Counted when the protocol is made: the loop may accept several connections before
        # the first of them is "made".
        self.count = 0
        self._sweeper: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return self.count

    def guard(
        self, protocols: Callable[[], asyncio.Protocol], tls: bool = False
    ) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for `loop.create_server` around aiohttp's (`runner.server`).

        With `tls` a connection counts once its handshake is done: the loop tells the
        protocol nothing of a handshake that failed (it is cut by the handshake timeout)."""
        loop = asyncio.get_running_loop()
        every = min(1.0, self.limits.request_header_timeout / 4)

        def sweep() -> None:
            """Close the connections whose request head is overdue."""
            overdue = loop.time() - self.limits.request_header_timeout
            for guarded in [g for g in self._open.values() if g.head_since < overdue]:
                guarded.slow()
            self._sweeper = loop.call_later(every, sweep)

        self._sweeper = loop.call_later(every, sweep)

        def make() -> asyncio.Protocol:
            if self.count >= self.limits.max_connections:
                self.cut("max-connections")
                return _Refused()
            if not tls:
                self.count += 1
            return _Guarded(self, protocols(), loop, counted=not tls)

        return make

    def close(self) -> None:
        """Stop the sweep (the server is closing)."""
        if self._sweeper is not None:
            self._sweeper.cancel()

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        """A request's head is parsed: its header timer stops."""
        guarded = self._open.get(transport) if transport is not None else None
        if guarded is not None:
            guarded.request_started()

    def request_ended(self, transport: asyncio.BaseTransport | None) -> None:
        guarded = self._open.get(transport) if transport is not None else None
        if guarded is not None:
            guarded.request_ended()

    def close_lingering(self, transport: asyncio.Transport) -> None:
        """Close a connection whose error answer is written, letting the client read it."""
        guarded = self._open.get(transport)
        if guarded is None or not transport.can_write_eof():  # TLS: its close_notify
            transport.close()
        else:
            guarded.linger()


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        writable = cast(asyncio.WriteTransport, transport)  # uvloop's are not subclasses
        writable.write(BUSY)
        writable.close()


class _Draining(asyncio.Protocol):
    """A lingering connection's protocol: its bytes are dropped; its end reaches aiohttp's."""

    __slots__ = ("_closer", "_inner", "_transport")

    def __init__(
        self, inner: asyncio.Protocol, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._inner = inner
        self._transport = transport
        self._closer = loop.call_later(LINGER, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool | None:
        return False  # the client is done: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._closer.cancel()
        self._inner.connection_lost(exc)


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, with the header deadline and write timer."""

    __slots__ = (
        "_connections",
        "_counted",
        "_inner",
        "_loop",
        "_transport",
        "_writes",
        "head_since",
    )

    def __init__(
        self,
        connections: Connections,
        inner: asyncio.Protocol,
        loop: asyncio.AbstractEventLoop,
        counted: bool = True,
    ) -> None:
        self._connections = connections
        self._counted = counted  # already in the count (made from a plain accept)
        self._inner = inner
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._writes: asyncio.TimerHandle | None = None  # the client must take bytes by then
        # When the head being read began: the connection's start, or the first byte after a
        # request; NOT_READING while a request runs, BETWEEN after it until a byte comes.
        self.head_since = NOT_READING

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        if not self._counted:
            self._connections.count += 1
            self._counted = True
        self._connections._open[transport] = self
        self.head_since = self._loop.time()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.head_since == BETWEEN:
            self.head_since = self._loop.time()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        if self._writes is None:
            timeout = self._connections.limits.client_write_timeout
            self._writes = self._loop.call_later(timeout, self._stalled)
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._writes is not None:
            self._writes.cancel()
            self._writes = None
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self._connections.count -= 1
        if self._transport is not None:
            self._connections._open.pop(self._transport, None)
        self._inner.connection_lost(exc)

    def request_started(self) -> None:
        self.head_since = NOT_READING

    def request_ended(self) -> None:
        self.head_since = BETWEEN

    def linger(self) -> None:
        """Close as nginx's lingering close does. A client refused mid-request may still be
        sending (the rest of an oversized head), and a close with its bytes unread resets
        the connection: the client's kernel then drops the answer it had not read yet. So
        the answer goes out followed by a FIN, what the client sends is read and dropped,
        and the connection closes at its EOF or after LINGER seconds."""
        assert self._transport is not None
        self.head_since = NOT_READING  # no header timeout: LINGER bounds it
        self._inner = _Draining(self._inner, self._transport, self._loop)
        self._transport.write_eof()
        if not self._transport.is_reading():  # aiohttp paused it: its queue of heads was full
            self._transport.resume_reading()

    def slow(self) -> None:
        """The head did not arrive in time: nothing is owed to this client. Over TLS not even
        a close_notify, whose answer it could keep the socket waiting for."""
        self.head_since = NOT_READING
        self._connections.cut("header-timeout")
        if self._transport is None:
            return
        if self._transport.get_extra_info("sslcontext") is not None:
            self._transport.abort()
        else:
            self._transport.close()

    def _stalled(self) -> None:
        """The client took nothing for too long: what is buffered for it will not go out."""
        self._writes = None
        self._connections.cut("write-timeout")
        if self._transport is not None:
            # A reset, not a FIN queued behind bytes the client will never take: the kernel
            # drops them at once, and the client learns that the answer was cut.
            sock = self._transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            self._transport.abort()

    def _cancel(self) -> None:
        if self._writes is not None:
            self._writes.cancel()
            self._writes = None
