"""Closing what a start opened, in reverse, whatever fails.

Each close is a callback of an `ExitStack` or `AsyncExitStack`, pushed as its resource is
opened, so that only what was opened is closed; a close that fails is said in one line and
the others still run. A close that raised out of the stack would replace the error that
stopped the start (the operator's one line) and hide the closes that failed before it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("gateway")


def close(what: str, closer: Callable[[], object]) -> None:
    """Run `closer`; a failure is logged in one line naming `what`."""
    try:
        closer()
    except Exception as exc:
        failed(what, exc)


async def aclose(what: str, closer: Callable[[], Awaitable[object]]) -> None:
    """Await `closer()`; a failure is logged in one line naming `what`."""
    try:
        await closer()
    except Exception as exc:
        failed(what, exc)


async def cancel(what: str, task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended; an error it ended with is logged."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        try:
            await task
        except Exception as exc:
            failed(what, exc)


def failed(what: str, exc: BaseException) -> None:
    detail = " ".join(str(exc).split()) or "no detail"
    log.error("closing %s failed: %s: %s", what, type(exc).__name__, detail)
