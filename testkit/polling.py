"""Waiting for a condition: poll it against a deadline, and fail naming what was awaited.

`until` is for tests and harnesses on an event loop (the condition may be a coroutine
function); `wait_until` is its twin for code that runs outside one (starting Redis
topologies). Both fail with `NotInTime`, which is an AssertionError (a test failure) and a
TimeoutError (what a harness catches).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any


class NotInTime(AssertionError, TimeoutError):
    """A condition still false at its deadline."""


async def until(
    check: Callable[[], Any | Awaitable[Any]],
    timeout: float = 10.0,
    what: str | None = None,
    every: float = 0.02,
) -> float:
    """Poll `check` (a function, or a coroutine function) every `every` seconds until it
    returns something true; the seconds it took. NotInTime once `timeout` passes, naming
    `what` (by default the check's own source)."""
    started = time.monotonic()
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise NotInTime(_late(check, timeout, what))
        await asyncio.sleep(every)


def wait_until(
    check: Callable[[], Any], timeout: float = 10.0, what: str | None = None, every: float = 0.02
) -> float:
    """`until` for code that runs outside an event loop: blocks between the polls."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise NotInTime(_late(check, timeout, what))
        time.sleep(every)
    return time.monotonic() - started


def _late(check: Callable[[], Any], timeout: float, what: str | None) -> str:
    return f"{what or _described(check)}: not within {timeout}s"


def _described(check: Callable[[], Any]) -> str:
    """A check's name for a failure: a lambda's source line, else its qualified name and the
    first line of its docstring."""
    name = getattr(check, "__qualname__", repr(check))
    if name.endswith("<lambda>"):
        try:
            return " ".join(inspect.getsource(check).split())
        except (OSError, TypeError):
            return name
    doc = inspect.getdoc(check)
    return f"{name} ({doc.splitlines()[0]})" if doc else name
