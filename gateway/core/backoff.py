"""Asking again out of step: the pauses of every loop of the gateway that tries something
again (a claim in flight, a release or a completion Redis refused, a worker or redis-server
that failed at its start, a lost Sentinel), each drawn at random, with every loop's bounds
named here.

Pauses that only double put every loop that started at the same moment on one grid: after
a failover, every gateway of a fleet asks the new master at 10, 20, 40 ms. Each pause here
is drawn between `first` and three times the one before, never past `longest` (the
"decorrelated jitter" of AWS's "Exponential Backoff And Jitter", as in redis-py's
`redis/backoff.py`), so that two loops started together part at their first pause.
"""

from __future__ import annotations

import math
import random
from typing import Final

# One source for every loop: each draw moves it on, so no two loops share a sequence.
_DRAWS: Final = random.Random()


class Backoff:
    """A loop's bounds: its pauses from `first` seconds up to `longest`, for `within` seconds
    at most from its start (for ever by default; a caller may give a window of its own)."""

    def __init__(self, first: float, longest: float, within: float = math.inf) -> None:
        self.first = first
        self.longest = longest
        self.within = within

    def pauses(self) -> Pauses:
        """A new loop's pauses."""
        return Pauses(self)


class Pauses:
    """One loop's pauses, drawn one by one: the first from `first` to three times `first`,
    each next one from `first` to three times the one before, none over `longest` (read at
    each draw: a test may shorten a loop's bounds)."""

    def __init__(self, backoff: Backoff) -> None:
        self._backoff = backoff
        self._last = backoff.first

    def next(self) -> float:
        bounds = self._backoff
        self._last = _DRAWS.uniform(bounds.first, min(bounds.longest, 3 * self._last))
        return self._last


# A duplicate waiting for the request in flight (`on_in_flight: wait`), within the route's
# `in_flight_wait`: it answers as soon as the first one ends, so it asks often at first.
IN_FLIGHT_WAIT: Final = Backoff(0.01, 0.25)
# A claim whose reply was lost, given back: within the lease and no longer than a shutdown
# waits for it.
GIVE_BACK: Final = Backoff(0.05, 1.0, within=2.0)
# An outcome that ran upstream and that Redis did not take, stored again (for ever, while
# the gateway lives: it is journaled meanwhile).
STORE_AGAIN: Final = Backoff(0.01, 0.5)
# A request that took a lost owner's key over, asking for that owner's own answer within its
# route's `late_answer_wait`: an owner cut off from Redis stores it every STORE_AGAIN.longest
# seconds at most, so the default wait covers three of its tries (docs/production.md, "a
# gateway that dies mid-call").
LATE_ANSWER: Final = Backoff(0.05, 0.25, within=3 * STORE_AGAIN.longest)
# A Cluster node answering TRYAGAIN (a slot migrating), within the call's redirects.
CLUSTER_TRY_AGAIN: Final = Backoff(0.025, 0.1)
# A Sentinel's announcements, listened to again once its connection is lost: a failover it
# announces meanwhile is missed, so it listens again soon.
SENTINEL_LISTEN: Final = Backoff(0.25, 1.0)
# A `--workers N` worker that exited before it served, started again (the others serve on).
WORKER_START: Final = Backoff(1.0, 60.0)
# The embedded redis-server, started again after it died under the gateway and its start
# failed.
EMBEDDED_START: Final = Backoff(1.0, 10.0)
