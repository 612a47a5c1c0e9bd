"""Coalescing the script calls of concurrent requests into one pipeline per loop turn.

A redis-py call costs tens of microseconds of CPU in the client alone; sent together, the
calls made during one turn of the event loop share one write, one read and one pooled
connection. Each call still gets its own reply or error, as if it had been made alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

_Call = tuple[AsyncScript, str, tuple[Any, ...], "asyncio.Future[Any]"]


class Coalescer:
    """Queues EVALSHA calls and sends those of one loop turn as a non-transactional pipeline.

    A script that Redis has forgotten (a restart, SCRIPT FLUSH) is loaded again and the calls
    that failed with NOSCRIPT are sent once more. A failure of the whole pipeline (connection
    lost, timeout) is raised to every call in it.
    """

    def __init__(self, client: Redis) -> None:
        self._client = client
        self._pending: list[_Call] = []
        self._sending: set[asyncio.Task[None]] = set()

    def call(self, script: AsyncScript, key: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """The reply of `script` run on `key` with `args`, once this turn's batch is back."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((script, key, args, future))
        return future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.ensure_future(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            replies = await self._execute(batch)
        except BaseException as exc:
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, future), reply in zip(batch, replies, strict=True):
            if future.done():  # its caller went away; the call ran all the same
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _execute(self, batch: list[_Call]) -> list[Any]:
        async with self._client.pipeline(transaction=False) as pipe:
            for script, key, args, _ in batch:
                pipe.evalsha(script.sha, 1, key, *args)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            scripts = list({id(batch[i][0]): batch[i][0] for i in missing}.values())
            async with self._client.pipeline(transaction=False) as pipe:
                for script in scripts:
                    pipe.script_load(script.script)
                for i in missing:
                    script, key, args, _ = batch[i]
                    pipe.evalsha(script.sha, 1, key, *args)
                again = await pipe.execute(raise_on_error=False)
            for i, reply in zip(missing, again[len(scripts) :], strict=True):
                replies[i] = reply
        return replies

    async def close(self) -> None:
        """Wait for the batches already sent."""
        if self._pending:
            self._flush()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)
