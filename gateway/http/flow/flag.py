"""Keys flagged for a person: a key whose outcome is unknown (recorded for an operator, or
held as a lost owner left it) goes on the console's attention list (`store.attention`), an
index written beside the scripts, not by them. The list reads each key's state when it is
shown, so a key flagged here that settles otherwise is dropped then."""

from __future__ import annotations

import logging

from gateway.errors import StoreUnavailable
from gateway.http.flow.context import Services
from gateway.store import attention

log = logging.getLogger(__name__)


async def note_held(s: Services, route: str, key: str, retention: float) -> None:
    """List the record `key` for a person. An index only: a Redis that refuses it loses
    nothing but the listing."""
    try:
        await attention.note(s.store, s.settings.redis.key_prefix, route, key, retention)
    except StoreUnavailable as exc:
        log.warning("route %s: a key is not listed for the console: %s", route, exc)
