"""Asking again: the pauses between tries of a call Redis has not answered as hoped (a
claim still in flight, a release or a completion refused), drawn by the loop's backoff
(`core.backoff`), and none past a deadline.

A class rather than an async generator, which mypyc does not compile."""

from __future__ import annotations

import asyncio
import time

from gateway.core.backoff import Backoff


class Pacing:
    """The pauses of `backoff`, for `within` seconds from now (the backoff's own window by
    default): `pause` waits the next one, cut short at the end."""

    def __init__(self, backoff: Backoff, within: float | None = None) -> None:
        self._pauses = backoff.pauses()
        self._deadline = time.monotonic() + (backoff.within if within is None else within)

    async def pause(self) -> bool:
        """Wait before the next try: True once waited, False at once when the time is up."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(self._pauses.next(), left))
        return True
