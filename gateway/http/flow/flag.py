"""Keys flagged for a person: a key whose outcome is unknown (recorded for an operator, or
held as a lost owner left it) goes on the console's attention list (`store.attention`), an
index written beside the scripts, not by them. The list reads each key's state when it is
shown, so a key flagged here that settles otherwise is dropped then."""

from __future__ import annotations

import logging

from gateway.errors import StoreUnavailable
from gateway.http.flow.context import Claimed, Services
from gateway.store import attention

log = logging.getLogger(__name__)


async def note_held(s: Services, c: Claimed) -> None:
    """List the claimed record for a person, for as long as its route keeps it. An index
    only: a Redis that refuses it loses nothing but the listing."""
    route = c.route
    try:
        prefix = c.settings.redis.key_prefix
        await attention.note(s.store, prefix, route.name, c.record_key, route.retention)
    except StoreUnavailable as exc:
        log.warning("route %s: a key is not listed for the console: %s", route.name, exc)
