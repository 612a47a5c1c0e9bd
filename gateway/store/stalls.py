"""When this process stood still: stopped (SIGSTOP, a paused VM or container) or starved of
CPU, so that its timers ran late.

A Redis call that timed out across such a stretch says nothing of Redis (the Store's breaker
does not count it), and a request held through one may have been retried at another gateway
meanwhile (a route that fails open does not forward it: `http.flow.handler`).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Final

TICK: Final = 0.25  # seconds between two looks at the clock (a few a second cost nothing)
STALL: Final = 0.5  # a look this much later than due: the process stood still


class Stalls:
    """The end of the latest stretch this process stood still, by a timer that should run
    every TICK seconds (`start` on the running loop; before, no stall is ever seen)."""

    def __init__(self) -> None:
        self.ended_at = -math.inf  # time.monotonic() when the latest stall ended
        self._due = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._due = time.monotonic() + TICK
        self._timer = asyncio.get_running_loop().call_later(TICK, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._due > STALL:
            self.ended_at = now
        self._due = now + TICK
        self._timer = asyncio.get_running_loop().call_later(TICK, self._tick)

    def held_through(self, since: float) -> bool:
        """Whether what began at `since` (time.monotonic()) was held through a stall."""
        return since < self.ended_at

    def within(self, seconds: float) -> bool:
        """Whether the process stood still less than `seconds` ago."""
        return time.monotonic() - self.ended_at < seconds

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
