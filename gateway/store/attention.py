"""The attention index: per route, the records that hold an unknown outcome for an operator,
in a sorted set scored by when it was recorded, so that the console finds them without
scanning every record.

It is written around the Lua scripts, not by them: the gateway adds a record once it has
stored an unknown outcome (a rare path, one extra call), and an operator's purge or
resolution removes it. A record that has since expired or been resolved elsewhere is
dropped as the index is read. Each set is one key of its own (its own Cluster slot), holds
at most LIMIT entries (the newest) and expires with the route's retention when idle.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from gateway.core.record import STATE_UNKNOWN
from gateway.errors import StoreUnavailable
from gateway.store.store import _FAILURES, Store

LIMIT = 1000  # entries kept per route
# The record states (a record's `s` field) that keep an entry listed, and what the console
# says of each.
HELD = {STATE_UNKNOWN.encode(): "unknown outcome"}


def index_key(prefix: str, route: str) -> str:
    """`prefix:attention:route`: apart from the records (`prefix:{...}`)."""
    return f"{prefix}:attention:{route}"


async def note(store: Store, prefix: str, route: str, rkey: str, retention: float) -> None:
    """Index the record `rkey`, which now holds a state of HELD (an unknown outcome)."""
    key = index_key(prefix, route)
    try:
        async with store.client.pipeline(transaction=False) as pipe:
            pipe.zadd(key, {rkey: time.time()})
            pipe.zremrangebyrank(key, 0, -LIMIT - 1)
            pipe.expire(key, max(1, int(retention)))
            await pipe.execute()
    except _FAILURES as exc:
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc


async def forget(store: Store, prefix: str, route: str, rkey: str) -> None:
    """An operator settled the record: it needs no one now."""
    try:
        await store.client.zrem(index_key(prefix, route), rkey)
    except _FAILURES as exc:
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc


async def listed(
    store: Store, prefix: str, routes: Iterable[str], limit: int = 100
) -> list[tuple[str, str, str, float]]:
    """(route, why, record key, since) of the newest indexed records still in a state of
    HELD, `limit` per route at most; entries whose record moved on are dropped."""
    found: list[tuple[str, str, str, float]] = []
    try:
        for route in routes:
            key = index_key(prefix, route)
            raw = await store.client.zrevrange(key, 0, limit - 1, withscores=True)
            entries = [(_raw(pair[0]), float(pair[1])) for pair in raw]
            if not entries:
                continue
            async with store.client.pipeline(transaction=False) as pipe:
                for rkey, _ in entries:
                    pipe.hget(rkey, "s")
                states = await pipe.execute()
            why = [HELD.get(state) for state in states]
            stale = [rkey for (rkey, _), said in zip(entries, why, strict=True) if not said]
            if stale:
                await store.client.zrem(key, *stale)
            found.extend(
                (route, said, rkey.decode(), since)
                for (rkey, since), said in zip(entries, why, strict=True)
                if said
            )
    except _FAILURES as exc:
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
    return found


def _raw(name: object) -> bytes:
    return name if isinstance(name, bytes) else str(name).encode()
