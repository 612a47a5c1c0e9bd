"""Keeping a claim alive while its upstream call runs."""

from __future__ import annotations

import asyncio
import logging
import time

from gateway.core.decision import may_still_send
from gateway.errors import StoreUnavailable
from gateway.store.store import Store
from gateway.telemetry.metrics import Metrics

log = logging.getLogger(__name__)


class Heartbeat:
    """Renews the lease every lease/3 from `start` to `stop`; notes when the lease is lost,
    and says whether the call may still be sent (`may_send`, the upstream's `SendGuard`).

    A lost lease (another owner holds the key) stops the renewals; the outcome is then
    not stored (complete is fenced by the token) and the loss is counted by the caller.
    Most upstream calls end long before the first renewal, so the renewal is a timer that
    starts a task only when it is due, rather than a task per request; `start` and `stop`
    are plain calls rather than an `async with`, two coroutines less per claimed call.
    """

    def __init__(
        self,
        store: Store,
        key: str,
        token: str,
        lease: float,
        hold: float,
        metrics: Metrics,
        since: float = 0.0,
    ) -> None:
        self._store = store
        self._key = key
        self._token = token
        self._lease = lease
        self._hold = hold  # how long the key outlives its lease: a lost owner's stays known
        self._metrics = metrics
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self.lost = False
        # When the lease last began, by this process's monotonic clock: the claim's start,
        # then each renewal's, taken before it was sent (never later than Redis's own).
        self.since = since

    def _schedule(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._lease / 3, self._due)

    def _due(self) -> None:
        self._timer = None
        self._task = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        asked = time.monotonic()
        try:
            renewed = await self._store.extend(self._key, self._token, self._lease, self._hold)
        except StoreUnavailable as exc:
            self._metrics.redis_errors.inc()
            log.warning("lease renewal failed, will try again: %s", exc)
        else:
            if not renewed:
                self.lost = True
                return
            self.since = asked
            self._metrics.lease_extensions.inc()
        self._schedule()

    def may_send(self) -> bool:
        """Whether the call may still go upstream: the lease, as last known to hold, is
        younger than half its length. A process that stood still since (stopped, starved)
        may have been taken for a lost owner, and a retry may have run the call meanwhile;
        asked just before the first byte is written, whatever came in between."""
        return not self.lost and may_still_send(time.monotonic() - self.since, self._lease)

    def start(self) -> None:
        self._schedule()

    def stop(self) -> None:
        """No renewal after this: the timer is cancelled, and a renewal under way with it
        (it never schedules another)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._task.cancel()
