"""The script calls of one loop turn as one write on a pipelined connection of our own.

The same batches as `redispy_pipeline.RedisPyPipeline` (at most `LANES` out at once, later
calls leave together with the next), on one `resp.RedisProtocol` instead of redis-py's
connections: a batch is one `transport.write`, and its replies resolve their calls in
`data_received` without a task, a reader coroutine or a timeout context per batch. For one
Redis node (`redis://`, `rediss://`, `unix://`); Sentinel and Cluster keep redis-py.

It keeps the RedisPyPipeline's promises. Each call gets its own reply or error (NOSCRIPT
included: the Store reloads and repeats). A call fails with TimeoutError one socket timeout
after it was made; if it was sent, Redis is taken to hang and the connection is dropped,
failing every call on it, as the RedisPyPipeline drops a batch's connection at its deadline. A
call whose caller gave up is never sent. A connection that breaks is replaced and the calls
waiting on it are sent once more (the scripts recognise a repeated call by its token).
"""

from __future__ import annotations

import asyncio
from typing import Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError

from gateway.store.redispy_pipeline import LANES
from gateway.store.resp import Command, Endpoint, RedisProtocol
from gateway.store.scripts import Script


class RespPipeline:
    """Queues EVALSHA calls and writes each loop turn's as one batch on one connection."""

    def __init__(self, endpoint: Endpoint, timeout: float) -> None:
        self._endpoint = endpoint
        self._timeout = timeout
        self._pending: list[Command] = []
        self._flush_scheduled = False
        self._busy = 0  # batches written whose last reply has not come back
        self._connection: RedisProtocol | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._drained: asyncio.Future[None] | None = None  # what close() waits on
        self._watchdog: asyncio.TimerHandle | None = None  # see _watch
        self._closed = False  # close() began: a call after it is refused, never reconnects

    def call(self, script: Script, key: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """The reply of `script` run on `key` with `args`, once its batch is back (a future,
        not a coroutine: the reply wakes its caller with no frame of ours in between). Once
        close() began, ConnectionError: a closed pipeline opens no connection again."""
        if self._closed:
            raise RedisConnectionError("the pipeline is closed")
        try:
            packed = hiredis.pack_command(("EVALSHA", script.sha, script.keys, key, *args))
        except TypeError as exc:  # an argument Redis cannot take: redis-py's error for it
            raise DataError(str(exc)) from exc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        command = Command(packed, loop.create_future(), deadline)
        self._pending.append(command)
        if not self._flush_scheduled and self._busy < LANES:
            # Sent at the end of this loop turn, with every call made during it.
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        if self._watchdog is None:
            self._watchdog = loop.call_at(deadline, self._watch)
        return command.future

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._pending and self._busy < LANES:  # else a batch that comes back takes them
            if self._connection is not None:
                # Calls whose callers gave up (their deadline passed in the queue) never leave.
                batch = [command for command in self._pending if not command.future.done()]
                self._pending = []
                if batch:
                    batch[-1].ends_batch = True
                    self._busy += 1
                    self._connection.send(batch)
            elif self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())  # then sent
        self._settle()

    def _batch_back(self) -> None:
        self._busy -= 1
        self._flush()  # the calls that queued while the lanes were out

    async def _connect(self) -> None:
        try:
            connection = await self._endpoint.open(self._batch_back, self._lost)
        except BaseException as exc:
            self._connecting = None
            batch, self._pending = self._pending, []
            _fail(batch, exc)
            self._settle()
            if not isinstance(exc, Exception):
                raise
            return
        self._connecting = None
        self._connection = connection
        self._flush()

    def _watch(self) -> None:
        """Fail the calls made a socket timeout ago and still unanswered. One timer for all,
        set for the oldest call, rather than one per call: the calls are made, queued and
        sent in order, so the oldest is the first waiting for a reply, or else queued."""
        self._watchdog = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        connection = self._connection
        if connection is not None and connection.waiting and connection.waiting[0].deadline <= now:
            # Sent and unanswered for a whole socket timeout: Redis hangs. Every call
            # behind it on this connection would wait as long; they all fail now.
            connection.abort(TimeoutError())
        for command in self._pending:  # queued all that time: they are never sent
            if command.deadline > now:
                break
            if not command.future.done():
                command.future.set_exception(TimeoutError())
        oldest = self._oldest_deadline()
        if oldest is not None:
            self._watchdog = loop.call_at(oldest, self._watch)

    def _oldest_deadline(self) -> float | None:
        connection = self._connection
        if connection is not None and connection.waiting:
            return connection.waiting[0].deadline
        for command in self._pending:
            if not command.future.done():
                return command.deadline
        return None

    def _lost(self, connection: RedisProtocol, waiting: list[Command], reason: Exception) -> None:
        """The connection ended with `waiting` unanswered: they go out once more on a new
        one, unless they already did or Redis hangs."""
        if connection is not self._connection:  # one that was being opened: its AUTH, SELECT
            _fail(waiting, reason)
            return
        self._connection = None
        self._busy = 0
        again: list[Command] = []
        for command in waiting:
            if command.future.done():
                continue
            if command.resent or isinstance(reason, TimeoutError):
                command.future.set_exception(reason)
            else:
                command.resent = True
                command.ends_batch = False
                again.append(command)
        self._pending[:0] = again
        self._flush()

    def _settle(self) -> None:
        """Wake close() once nothing is out, queued or connecting."""
        drained = self._drained
        idle = not (self._busy or self._pending or self._connecting)
        if idle and drained is not None and not drained.done():
            drained.set_result(None)

    async def close(self) -> None:
        """Wait for the batches already sent and the calls already queued, then close the
        connection; calls made from now on are refused."""
        self._closed = True
        self._drained = asyncio.get_running_loop().create_future()
        self._settle()
        await self._drained  # bounded: each call fails at its deadline, and its batch with it
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        connection, self._connection = self._connection, None
        if connection is not None and connection.transport is not None:
            connection.transport.close()
            await connection.closed


def _fail(batch: list[Command], exc: BaseException) -> None:
    for command in batch:
        if command.future.done():
            continue
        if isinstance(exc, Exception):
            command.future.set_exception(exc)
        else:  # the connecting task was cancelled (shutdown): so are its callers
            command.future.cancel()
