"""One pipelined connection to a Redis node, on an asyncio Protocol and hiredis's reader.

Redis answers a connection's commands in the order they were sent, so each command waits
in a queue and `data_received` hands the next whole reply to the oldest waiting one: no
coroutine, stream reader or timeout context per reply, as redis-py has. The connection
speaks RESP2: the scripts' replies (arrays of bulk strings and integers) are the same
Python values redis-py gives a client that does not decode (bytes, int, lists).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection
from redis.exceptions import AuthenticationError, ConnectionError, InvalidResponse
from redis.exceptions import TimeoutError as RedisTimeoutError

# hiredis's "no whole reply yet": an object no reply can be.
_NOT_ENOUGH: Final = object()
# RESP3's out-of-band frames (a proxy's, or a RESP3 server's): never the reply to a command.
_PUSH: Final = hiredis.PushNotification


class Command:
    """A packed command and the future its reply resolves."""

    __slots__ = ("deadline", "ends_batch", "future", "packed", "resent")

    def __init__(self, packed: bytes, future: asyncio.Future[Any], deadline: float) -> None:
        self.packed = packed
        self.future = future
        self.deadline = deadline  # the loop's time when its caller gives up
        self.resent = False
        self.ends_batch = False


class RedisProtocol(asyncio.Protocol):
    """Writes commands and resolves their futures, in order, as their replies come in.

    `on_batch` is called when the last command of a batch has its reply; `on_lost` with the
    commands still waiting when the connection ends (for any reason, ours included)."""

    def __init__(
        self,
        on_batch: Callable[[], None],
        on_lost: Callable[[RedisProtocol, list[Command], Exception], None],
    ) -> None:
        self._reader = hiredis.Reader(
            protocolError=InvalidResponse,
            replyError=BaseParser.parse_error,  # NOSCRIPT, OOM, ...: redis-py's own classes
            notEnoughData=_NOT_ENOUGH,
        )
        self.waiting: deque[Command] = deque()
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self._on_batch = on_batch
        self._on_lost = on_lost
        self._reported = False  # on_lost is called once
        self.lost: Exception | None = None  # why it ended, once it has

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the methods but are not asyncio.Transport subclasses.
        self.transport = cast(asyncio.Transport, transport)

    def send(self, commands: list[Command]) -> None:
        self.waiting.extend(commands)
        assert self.transport is not None
        if len(commands) == 1:
            self.transport.write(commands[0].packed)
        else:
            self.transport.write(b"".join([command.packed for command in commands]))

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        waiting = self.waiting
        try:
            reply = reader.gets()
            while reply is not _NOT_ENOUGH:
                if type(reply) is _PUSH:  # set aside, as redis-py does
                    reply = reader.gets()
                    continue
                if not waiting:  # Redis refusing a client ("max number of clients") or garbage
                    self.abort(ConnectionError(f"Redis sent a reply nothing asked for: {reply}"))
                    return
                command = waiting.popleft()
                future = command.future
                if not future.done():  # else its caller went away; it ran all the same
                    if isinstance(reply, Exception):  # an error reply, as its class
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
                if command.ends_batch:
                    self._on_batch()
                reply = reader.gets()
        except InvalidResponse as exc:
            self.abort(ConnectionError(f"Redis sent a reply that cannot be read: {exc!r}"))

    def abort(self, reason: Exception) -> None:
        """Close at once: the waiting commands go to `on_lost` with `reason` now, so that
        nothing more is sent on this connection meanwhile."""
        self._report(reason)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        self._report(ConnectionError(f"Connection closed by server{f': {exc}' if exc else '.'}"))

    def _report(self, reason: Exception) -> None:
        if self._reported:
            return
        self._reported = True
        self.lost = reason
        waiting = list(self.waiting)
        self.waiting.clear()
        self._on_lost(self, waiting, reason)


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect, as read from a redis-py client's pool."""

    host: str
    port: int
    path: str | None  # a unix socket
    ssl: Any  # an ssl.SSLContext, or None
    db: int
    username: str | None
    password: str | None
    connect_timeout: float

    @classmethod
    def of(cls, client: Redis) -> Endpoint:
        """The same address, TLS, credentials and database the client's own connections use."""
        pool = client.connection_pool
        template = pool.connection_class(**pool.connection_kwargs)  # never connected
        path = template.path if isinstance(template, UnixDomainSocketConnection) else None
        ssl = template.ssl_context.get() if isinstance(template, SSLConnection) else None
        host = getattr(template, "host", "")
        return cls(
            host=host,
            port=int(getattr(template, "port", 0)),
            path=path,
            ssl=ssl,
            db=int(template.db or 0),
            username=template.username or None,
            password=template.password or None,
            connect_timeout=float(template.socket_connect_timeout or 5.0),
        )

    def handshake(self) -> list[tuple[Any, ...]]:
        commands: list[tuple[Any, ...]] = []
        if self.password is not None:
            user = (self.username,) if self.username is not None else ()
            commands.append(("AUTH", *user, self.password))
        if self.db:
            commands.append(("SELECT", self.db))
        return commands

    async def open(
        self,
        on_batch: Callable[[], None],
        on_lost: Callable[[RedisProtocol, list[Command], Exception], None],
    ) -> RedisProtocol:
        """A connection that has authenticated and selected its database, within the
        connect timeout; redis-py's ConnectionError, TimeoutError or AuthenticationError."""
        loop = asyncio.get_running_loop()
        where = self.path or f"{self.host}:{self.port}"
        protocol: RedisProtocol | None = None

        def made() -> RedisProtocol:
            nonlocal protocol
            protocol = RedisProtocol(on_batch, on_lost)
            return protocol

        try:
            async with asyncio.timeout(self.connect_timeout):
                if self.path is not None:
                    await loop.create_unix_connection(made, self.path)
                else:
                    await loop.create_connection(made, self.host, self.port, ssl=self.ssl)
                assert protocol is not None
                commands = [  # no deadlines of their own: the connect timeout covers them
                    Command(hiredis.pack_command(c), loop.create_future(), 0.0)
                    for c in self.handshake()
                ]
                if commands:
                    protocol.send(commands)
                    try:
                        for command in commands:
                            await command.future
                    except AuthenticationError:
                        raise  # Redis said why
                    except ConnectionError as closed:
                        raise ConnectionError(
                            f"Redis at {where} closed the connection before answering "
                            f"{' and '.join(str(c[0]) for c in self.handshake())} ({closed})"
                        ) from closed
                if protocol.lost is not None:
                    # It ended before this task resumed (uvloop reads the socket first): a
                    # connection never to send on, its on_lost already called.
                    raise ConnectionError(
                        f"Redis at {where} closed the connection: {protocol.lost}"
                    )
        except TimeoutError as timeout:
            _abort(protocol, timeout)
            raise RedisTimeoutError(f"Timeout connecting to Redis at {where}") from timeout
        except OSError as error:
            _abort(protocol, error)
            raise ConnectionError(f"Error connecting to Redis at {where}: {error}") from error
        except BaseException as other:
            _abort(protocol, other)
            raise
        return protocol


def _abort(protocol: RedisProtocol | None, exc: BaseException) -> None:
    if protocol is not None:
        protocol.abort(exc if isinstance(exc, Exception) else ConnectionError("connect cancelled"))
