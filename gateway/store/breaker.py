"""A circuit breaker: after repeated Redis errors, fail fast and probe back now and then."""

from __future__ import annotations

import time
from collections.abc import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    """`failures` errors in a row open the circuit for `reset` seconds; then one probe may pass.

    A success closes it again; a failed probe opens it for another `reset`.
    """

    def __init__(
        self, failures: int, reset: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._threshold = failures
        self._reset = reset
        self._clock = clock
        self._errors = 0
        self._opened_at = 0.0
        self.state = CLOSED

    def allow(self) -> bool:
        """Whether a call may go to Redis now."""
        if self.state == CLOSED:
            return True
        now = self._clock()
        if now - self._opened_at >= self._reset:
            # This caller is the probe; another may follow only after a further `reset`.
            self.state = HALF_OPEN
            self._opened_at = now
            return True
        return False

    def success(self) -> None:
        self._errors = 0
        self.state = CLOSED

    def failure(self) -> None:
        self._errors += 1
        if self.state == HALF_OPEN or self._errors >= self._threshold:
            self.state = OPEN
            self._opened_at = self._clock()
