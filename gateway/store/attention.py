"""The attention index: per route, the records that need a person (an unknown outcome held
for an operator, a lost owner's key), in a sorted set scored by when they were flagged, so
that the console finds them without scanning every record.

It is written around the Lua scripts, not by them: the gateway adds a record when a call's
outcome turns unknown or a lost owner's key is taken over (rare paths, one extra call each),
and an operator's purge or resolution removes it. Whoever reads the index reads each
record's state too and removes the entries that settled otherwise (expired, resolved, run
again). Each set is one key of its own (its own Cluster slot), holds at most LIMIT entries
(the newest) and expires with the route's retention when idle.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Final

from gateway.errors import StoreUnavailable
from gateway.store.failures import FAILURES
from gateway.store.store import Store

LIMIT: Final = 1000  # entries kept per route


def index_key(prefix: str, route: str) -> str:
    """`prefix:attention:route`: apart from the records (`prefix:{...}`)."""
    return f"{prefix}:attention:{route}"


async def note(store: Store, prefix: str, route: str, rkey: str, retention: float) -> None:
    """Index the record `rkey`, which needs a person now."""
    key = index_key(prefix, route)
    try:
        async with store.client.pipeline(transaction=False) as pipe:
            pipe.zadd(key, {rkey: time.time()}, nx=True)  # flagged first then
            pipe.zremrangebyrank(key, 0, -LIMIT - 1)
            pipe.expire(key, max(1, int(retention)))
            await pipe.execute()
    except FAILURES as exc:
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc


async def forget(store: Store, prefix: str, route: str, *rkeys: str) -> None:
    """The records settled (by an operator, or otherwise): they need no one now."""
    try:
        await store.client.zrem(index_key(prefix, route), *rkeys)
    except FAILURES as exc:
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc


async def entries(
    store: Store, prefix: str, routes: Iterable[str], limit: int = 100
) -> list[tuple[str, str, float]]:
    """(route, record key, since) of the newest `limit` entries of each route's index."""
    found: list[tuple[str, str, float]] = []
    try:
        for route in routes:
            raw = await store.client.zrevrange(
                index_key(prefix, route), 0, limit - 1, withscores=True
            )
            found.extend((route, _raw(pair[0]).decode(), float(pair[1])) for pair in raw)
    except FAILURES as exc:
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
    return found


async def count(store: Store, prefix: str, routes: Iterable[str]) -> int:
    """The entries of every route's index (some may have settled since they were flagged)."""
    try:
        return sum([await store.client.zcard(index_key(prefix, route)) for route in routes])
    except FAILURES as exc:
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc


def _raw(name: object) -> bytes:
    return name if isinstance(name, bytes) else str(name).encode()
