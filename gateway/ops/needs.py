"""The console's attention list: the records that need a person, newest first, a page at a
time, with how many there are and whether the list is whole.

Redis's attention index (`store.attention`) names the unknown outcomes held for an operator
and the lost owners' keys; this process adds what it alone knows: outcomes journaled and not
stored yet, calls running past their lease. While Redis is unreachable the list holds only
the latter and says it is incomplete.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

from aiohttp import web

from gateway.core.keys import route_of_name
from gateway.errors import StoreUnavailable
from gateway.http.flow.context import Services
from gateway.ops import keyops
from gateway.store import attention
from gateway.store.store import Store

PAGE: Final = 50  # entries a page shows unless it asks for another size
MAX_PAGE: Final = 200


def paging(request: web.Request) -> tuple[int, int]:
    """The page asked for (`offset`, `limit`), kept within bounds: a bad value is the
    default, never an error."""
    values = []
    for name, default, most in (("offset", 0, attention.LIMIT), ("limit", PAGE, MAX_PAGE)):
        try:
            value = int(request.query.get(name, default))
        except ValueError:
            value = default
        values.append(min(max(value, 0), most))
    return values[0], max(1, values[1])


async def attention_page(request: web.Request, services: Services) -> web.Response:
    """`{"items", "total", "offset", "limit", "own", "incomplete"}`: a page of the records that need
    a person, newest first; `total` counts the index's entries (some may have settled since
    they were flagged: they leave it as they are read) and this process's own."""
    settings = services.settings
    offset, limit = paging(request)
    own = [
        {
            "route": _route_of(settings.redis.key_prefix, record),
            "why": "journaled, not stored",
            "record": record,
            "since": since,
        }
        for record, since in services.journal.unstored()
    ]
    leases = {r.name: r.lease for r in settings.routes}
    own += [
        {"route": route, "why": "running past its lease", "record": record, "since": since}
        for route, record, since in services.watch.overdue(leases)
    ]
    incomplete = False
    indexed: list[dict[str, Any]] = []
    total = len(own)
    try:
        prefix = settings.redis.key_prefix
        total += await attention.count(services.store, prefix, list(leases))
        found = await attention.entries(services.store, prefix, list(leases), offset + limit)
        newest = sorted(found, key=lambda entry: entry[2], reverse=True)[offset : offset + limit]
        indexed = await _held(services.store, prefix, newest)
    except StoreUnavailable:  # what this process knows still; the page says it is not all
        incomplete = True
    items = sorted([*own, *indexed], key=lambda item: item["since"], reverse=True)
    page = {"items": items[:limit], "total": total, "offset": offset, "limit": limit}
    # `own`: of the total, this process's alone (a --workers supervisor adds theirs up).
    return web.json_response({**page, "own": len(own), "incomplete": incomplete})


async def _held(
    store: Store, prefix: str, entries: list[tuple[str, str, float]]
) -> list[dict[str, Any]]:
    """The indexed records that still need a person, by their state now; the others leave
    the index."""
    held = []
    for route, record, since in entries:
        described = keyops.describe(await store.inspect(record))
        why = _why(described)
        if why:
            held.append({"route": route, "why": why, "record": record, "since": since})
        elif described["state"] != "pending":  # settled: a pending one may be stored yet
            with contextlib.suppress(StoreUnavailable):
                await attention.forget(store, prefix, route, record)
    return held


def _why(described: dict[str, Any]) -> str | None:
    if described["state"] == "owner-lost":
        return "owner lost, key held"
    if described["state"] != "unknown":
        return None
    lost = described.get("extra", {}).get("failure") == "owner-lost"
    return "owner lost, outcome unknown" if lost else "unknown outcome"


def _route_of(prefix: str, record: str) -> str:
    """The route in a record's key, of either format."""
    return route_of_name(prefix, record) or "-"
