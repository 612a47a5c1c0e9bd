"""A circuit breaker: after repeated Redis errors, fail fast and probe back now and then."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol

CLOSED: Final = "closed"
OPEN: Final = "open"
HALF_OPEN: Final = "half_open"
_WORSE: Final = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}


class Circuit(Protocol):
    """What the metrics read: a breaker's state, or the worst of several."""

    @property
    def state(self) -> str: ...


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

    def like(self) -> CircuitBreaker:
        """A new, closed breaker with the same settings."""
        return CircuitBreaker(self._threshold, self._reset, self._clock)


class NodeBreakers:
    """A breaker per Redis Cluster node, each made like `template`: one failed shard fails
    fast on its own while the others serve. `template` serves calls whose node is not known
    yet (before the slot map is read)."""

    def __init__(self, template: CircuitBreaker) -> None:
        self._template = template
        self._nodes: dict[str, CircuitBreaker] = {}

    def of(self, node: str | None) -> CircuitBreaker:
        if node is None:
            return self._template
        breaker = self._nodes.get(node)
        if breaker is None:
            breaker = self._nodes[node] = self._template.like()
        return breaker

    @property
    def state(self) -> str:
        """The worst state of any node's breaker."""
        states = [self._template.state, *[b.state for b in self._nodes.values()]]
        return max(states, key=_WORSE.__getitem__)
