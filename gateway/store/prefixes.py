"""Records of this config's routes under another key prefix than this gateway's, looked for
once at start. The gateway never looks under that prefix, so a retry of one of their keys
runs upstream again: one log line says so.

How they are found: a bounded SCAN of the record names themselves (MATCH `*:{*`, BATCHES
calls of COUNT keys per primary, a few milliseconds; the names parsed by
`core.keys.prefix_and_route`). The records are the evidence that counts, and right after a
change of `redis.key_prefix` they are all that Redis holds of the routes, so a sample from
the start of the keyspace finds them; a Redis holding millions of other keys delays no
start, and a record beyond the sample goes unseen (a help to the operator, not a
guarantee). A mark was the other way, and both kinds fail: one under this gateway's prefix
is never looked at by a gateway given another prefix (it would have to know the old one),
and one under a fixed name lies outside `key_prefix`, where an ACL limited to the prefix
(`~idem:*`), itself a reason to change it, refuses it. A Redis that refuses SCAN or does not
answer is no error here: nothing is said. Another deployment sharing the Redis under a
prefix of its own, with routes of the same names, is named too; the line says whose they may
be.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection
from typing import Any, Final

from redis.asyncio import Redis, RedisCluster

from gateway.core.keys import prefix_and_route
from gateway.store.failures import FAILURES

log = logging.getLogger(__name__)

MATCH: Final = "*:{*"  # every record's name, of either format, holds its hash tag so
COUNT: Final = 1000  # keys each SCAN call looks at (Redis's hint)
BATCHES: Final = 10  # SCAN calls per primary, at most


async def other_prefixes(
    client: Redis | RedisCluster, prefix: str, routes: Collection[str]
) -> Counter[tuple[str, str]]:
    """How many records of each (other prefix, route of `routes`) a bounded SCAN of every
    primary sees. Redis failures raise."""
    names: list[Any] = []
    if isinstance(client, RedisCluster):
        for node in client.get_primaries():
            names += await _sample(client, node)
    else:
        names += await _sample(client, None)
    found: Counter[tuple[str, str]] = Counter()
    for name in names:
        text = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        parsed = prefix_and_route(text)
        if parsed is not None and parsed[0] != prefix and parsed[1] in routes:
            found[parsed] += 1
    return found


async def _sample(client: Redis | RedisCluster, node: Any) -> list[Any]:
    """The record-like names of at most BATCHES SCAN calls on one node (`node` None: the
    client's one server)."""
    names: list[Any] = []
    cursor: Any = 0
    for _ in range(BATCHES):
        # Any: a Cluster client's cursor is a dict (per node, one node here), not the int
        # the stubs say, and compiled code checks the stubs' types as it unpacks.
        scanner: Any = client  # its scan's reply unchecked, by the compiled build too
        if node is None:
            reply = await scanner.scan(cursor, match=MATCH, count=COUNT)
        else:
            reply = await scanner.scan(cursor, match=MATCH, count=COUNT, target_nodes=node)
        cursor, keys = reply
        if isinstance(cursor, dict):
            cursor = next(iter(cursor.values()), 0)
        names += keys
        if int(cursor) == 0:
            break
    return names


async def warn_other_prefixes(
    client: Redis | RedisCluster, prefix: str, routes: Collection[str]
) -> None:
    """At start: one warning line when records of `routes` are seen under another prefix."""
    try:
        found = await other_prefixes(client, prefix, routes)
    except FAILURES as exc:
        log.debug("records under other key prefixes not looked for: %s", exc)
        return
    if not found:
        return
    seen = "; ".join(
        f"{count} of route {route!r} under {other!r}"
        for (other, route), count in sorted(found.items())
    )
    log.warning(
        "redis: records stored under another key_prefix than this gateway's %r were seen "
        "at start (%s): this gateway never replays them, and a retry of one of their keys "
        "runs upstream again. If key_prefix was changed, set it back until the longest "
        "retention has passed since their last request; if another deployment uses that "
        "prefix, they are its own (docs/configuration.md, redis.key_prefix)",
        prefix,
        seen,
    )
