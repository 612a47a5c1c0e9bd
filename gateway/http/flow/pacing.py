"""Asking again: the pauses between tries of a call Redis has not answered as hoped (a
claim still in flight, a release or a completion refused), each twice the one before up to
a longest, and none past a deadline.

A class rather than an async generator, which mypyc does not compile."""

from __future__ import annotations

import asyncio
import math
import time


class Pacing:
    """Pauses from `backoff[0]` seconds, doubling up to `backoff[1]`, for `within` seconds
    from now (for ever by default): `pause` waits the next one, cut short at the end."""

    def __init__(self, backoff: tuple[float, float], within: float = math.inf) -> None:
        self._next, self._longest = backoff
        self._deadline = time.monotonic() + within

    async def pause(self) -> bool:
        """Wait before the next try: True once waited, False at once when the time is up."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(self._next, left))
        self._next = min(self._next * 2, self._longest)
        return True
