"""Coalescing the script calls of concurrent requests into pipelines on held connections.

A redis-py call costs tens of microseconds of CPU in the client alone (pool checkout, a
timeout per read, a task per write); sent together, the calls made while Redis is busy with
the previous batch share one write, one read deadline and one connection. Each call still
gets its own reply or error, as if it had been made alone.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError, DataError, ResponseError

from gateway.store.scripts import Script

_Call = tuple[Script, str, tuple[Any, ...], "asyncio.Future[Any]"]

# Batches in flight at once, each on a connection of its own. While they are all out, new
# calls queue and leave together with the next batch: the busier, the larger the batches.
LANES: Final = 2


class RedisPyPipeline:
    """Queues EVALSHA calls and sends them as non-transactional pipelines.

    A call whose script Redis has forgotten (a restart, SCRIPT FLUSH) fails with NOSCRIPT like
    any other error of its own; the Store loads the scripts again and repeats it, as it does
    for unpipelined calls. A broken connection is replaced and the
    batch sent once more, as the client's own retry does for a single call (the scripts
    recognise a repeated call by its token). A failure of the whole batch (Redis down, no
    answer within the socket timeout) is raised to every call in it.
    """

    def __init__(self, client: Redis, timeout: float) -> None:
        self._client = client
        self._timeout = timeout
        self._pending: list[_Call] = []
        self._flush_scheduled = False
        self._busy = 0
        self._idle: list[AbstractConnection] = []
        self._held: list[AbstractConnection] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._closed = False  # close() began: a call after it is refused, never reconnects

    async def call(self, script: Script, key: str, args: tuple[Any, ...]) -> Any:
        """The reply of `script` run on `key` with `args`, once its batch is back.

        The socket timeout counts from this call, not from when its batch leaves: a call
        queued behind batches that a hung Redis holds fails in time like any other, and is
        dropped unsent (TimeoutError). Once close() began, ConnectionError: a closed pipeline
        takes no connection again."""
        if self._closed:
            raise ConnectionError("the pipeline is closed")
        future = self._enqueue(script, key, args)
        # A timer on the future rather than `asyncio.timeout`, whose context costs more than
        # the rest of this call: at the deadline the future fails and its lane skips it.
        timer = asyncio.get_running_loop().call_later(self._timeout, _time_out, future)
        try:
            return await future
        finally:
            timer.cancel()

    def _enqueue(self, script: Script, key: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((script, key, args, future))
        if not self._flush_scheduled and self._busy < LANES:
            # Sent at the end of this loop turn, with every call made during it.
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._pending or self._busy >= LANES:
            return  # a lane that is out takes them when it is back
        self._busy += 1
        task = asyncio.ensure_future(self._lane())
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _lane(self) -> None:
        try:
            connection = self._idle.pop() if self._idle else await self._connect()
        except BaseException as exc:
            self._busy -= 1
            batch, self._pending = self._pending, []
            _fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
            return
        try:
            while self._pending:
                # Calls whose callers gave up (their deadline passed in the queue) never leave.
                batch = [call for call in self._pending if not call[3].done()]
                self._pending = []
                if not batch:
                    continue
                try:
                    replies = await self._execute(connection, batch)
                except BaseException as exc:
                    _fail(batch, exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (*_, future), reply in zip(batch, replies, strict=True):
                    if future.done():  # its caller went away; the call ran all the same
                        continue
                    if isinstance(reply, Exception):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
        finally:
            self._busy -= 1
            self._idle.append(connection)

    async def _connect(self) -> AbstractConnection:
        pool = self._client.connection_pool
        connection: AbstractConnection = await pool.get_connection()  # type: ignore[no-untyped-call,unused-ignore]
        self._held.append(connection)
        return connection

    async def _execute(self, connection: AbstractConnection, batch: list[_Call]) -> list[Any]:
        commands = [
            ("EVALSHA", script.sha, script.keys, key, *args) for script, key, args, _ in batch
        ]
        try:
            replies = await self._round_trip(connection, commands)
        except TimeoutError:
            raise  # a hung Redis: waiting twice as long would not help
        except (ConnectionError, OSError):
            replies = await self._round_trip(connection, commands)  # on a fresh connection
        return replies

    async def _round_trip(
        self, connection: AbstractConnection, commands: list[tuple[Any, ...]]
    ) -> list[Any]:
        """Send the commands at once and read every reply, within one deadline."""
        packed = _pack(commands)
        replies: list[Any] = []
        try:
            async with asyncio.timeout(self._timeout):
                await connection.send_packed_command(packed, check_health=False)
                for _ in commands:
                    try:
                        # No timeout of its own: the deadline above covers the whole batch.
                        replies.append(await connection.read_response(timeout=float("inf")))
                    except ResponseError as exc:
                        replies.append(exc)
        except BaseException as failure:
            # Replies may be half read: the connection cannot be trusted any more.
            await connection.disconnect(nowait=True)
            raise failure  # named: a bare raise after an await re-raises the wrong one compiled
        return replies

    async def close(self) -> None:
        """Wait for the batches already sent and give the connections back to the pool;
        calls made from now on are refused."""
        self._closed = True
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
        for connection in self._held:
            await self._client.connection_pool.release(connection)
        self._held.clear()
        self._idle.clear()


def _pack(commands: list[tuple[Any, ...]]) -> bytes:
    """hiredis packs in C what redis-py's asyncio connection packs in Python. An argument it
    cannot encode is redis-py's DataError, as it would be from redis-py itself."""
    try:
        return b"".join([hiredis.pack_command(command) for command in commands])
    except TypeError as exc:
        raise DataError(str(exc)) from exc


def _time_out(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


def _fail(batch: list[_Call], exc: BaseException) -> None:
    for *_, future in batch:
        if future.done():
            continue
        if isinstance(exc, Exception):
            future.set_exception(exc)
        else:  # the sender was cancelled (shutdown): so are its callers
            future.cancel()
