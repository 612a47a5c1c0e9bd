"""The compiled build's task factory (`build.contained_task`) runs a task as asyncio would: its
result, its cancellation and its coroutine's end, a task cancelled before its first step
included. Set on the running loop here, so that both builds test it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator

import pytest

from gateway import build


@pytest.fixture
async def contained() -> AsyncIterator[None]:
    loop = asyncio.get_running_loop()
    before = loop.get_task_factory()
    loop.set_task_factory(build.contained_task)
    yield
    loop.set_task_factory(before)


async def _answer(wait: asyncio.Event) -> int:
    await wait.wait()
    return 42


async def test_a_task_gives_its_coroutines_result(contained: None) -> None:
    wait = asyncio.Event()
    task = asyncio.ensure_future(_answer(wait))
    wait.set()
    assert await task == 42


async def test_a_task_cancelled_before_its_first_step_closes_its_coroutine(
    contained: None,
) -> None:
    """Else the coroutine is never awaited: Python warns of it on stderr when it is collected
    (as the blob sweep's did under every start-up that failed after it was made)."""
    coroutine = _answer(asyncio.Event())
    task = asyncio.ensure_future(coroutine)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED


async def test_a_task_cancelled_while_it_waits_runs_its_coroutines_cleanup(
    contained: None,
) -> None:
    started, cleaned = asyncio.Event(), asyncio.Event()

    async def waits() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    task = asyncio.ensure_future(waits())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned.is_set()
