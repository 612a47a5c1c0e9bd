"""The console's short history: the last 15 minutes of the gateway's answers per second,
its errors, the requests it sent upstream without idempotency because Redis was down
(bypassed) and its overhead, sampled by the admin process from the metrics it serves, so
that an operator who opens the page sees what happened before."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final

from aiohttp import web
from prometheus_client.metrics_core import Metric

from gateway.ops.overview import quantile, samples
from gateway.telemetry import metrics as m

SPAN: Final = 15 * 60.0  # seconds kept
EVERY: Final = 10.0  # seconds between two points


class History:
    """Points of (time, answers/s, errors/s, bypassed/s, overhead p99 ms) over `span`,
    each from the counts' change since the point before."""

    def __init__(self, every: float = EVERY, span: float = SPAN) -> None:
        self.every = every
        self.span = span
        self.points: deque[dict[str, Any]] = deque(maxlen=int(span // every))
        self._last: tuple[float, dict[str, float], dict[float, float]] | None = None

    def add(self, now: float, families: Iterable[Metric]) -> None:
        families = list(families)
        counts: dict[str, float] = {}
        for labels, value in samples(families, "idem_requests_total"):
            outcome = labels.get("outcome", "")
            counts[outcome] = counts.get(outcome, 0.0) + value
        buckets: dict[float, float] = {}  # every route's overhead in one histogram
        for labels, value in samples(families, "idem_overhead_seconds_bucket"):
            bound = float(labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + value
        last, self._last = self._last, (now, counts, buckets)
        if last is None or now <= last[0]:
            return
        then, before, before_buckets = last
        seconds = now - then

        def per_second(outcomes: Iterable[str]) -> float:
            grown = sum(max(0.0, counts.get(o, 0.0) - before.get(o, 0.0)) for o in outcomes)
            return round(grown / seconds, 3)

        grown = {b: max(0.0, v - before_buckets.get(b, 0.0)) for b, v in buckets.items()}
        p99, beyond = quantile(0.99, grown)
        self.points.append(
            {
                "time": round(now, 3),
                "answers": per_second(counts),
                "errors": per_second([m.ERROR]),
                "bypassed": per_second([m.BYPASSED]),
                "overhead_p99_ms": p99,
                "overhead_p99_beyond": beyond,
            }
        )

    def document(self) -> dict[str, Any]:
        return {"every": self.every, "span": self.span, "points": list(self.points)}


async def keep(history: History, families: Callable[[], Iterable[Metric]]) -> None:
    """Add a point every `history.every` seconds, for as long as the admin listener runs."""
    while True:
        history.add(time.time(), families())
        await asyncio.sleep(history.every)


HISTORY: Final = web.AppKey("history", History)


async def history_page(request: web.Request) -> web.Response:
    return web.json_response(request.app[HISTORY].document())
