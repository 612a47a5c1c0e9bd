"""Background tasks that must finish even when their client goes away."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class TaskSet:
    """Keeps a reference to every task it starts, so none is lost, and can wait for all."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        # A coroutine, always: ensure_future's checks would add nothing.
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the running tasks (graceful shutdown)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
