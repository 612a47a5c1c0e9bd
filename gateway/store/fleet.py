"""Whether a gateway of an earlier release shares this Redis, and so which record format may
be written.

A gateway whose `redis.record_format` is unset writes format 2 on a Redis no earlier release
has used: one that holds no record under a format-1 name (`holds_format_1`, a SCAN made once,
its finding kept in the mark `prefix:compact-since` so that the next start need not scan). On
one that does, an existing fleet's, it writes format 1 until the operator asks for 2, as
below; either way, while a gateway of an earlier release is seen, it writes format 1.

A gateway of an earlier release reads format 1 only, or format 1 and format 2's first layout
(`core.layout.V2`): it takes a record this release stores in format 2 for an absent key (it
never looks under format 2's name), for a Redis error (which a `fail_mode: open` route
forwards), or for a damaged one. Any of these runs the key again, or answers it wrongly. So
format 2 is written only while no such gateway is seen; one that is seen holds every gateway
of this release at format 1 until an operator says the fleet is upgraded (`idem-gateway
upgraded`, docs/production.md#upgrading).

Such a gateway is seen by its scripts: it loads `lua/claim.lua` as its release wrote it into
Redis's script cache at its first claim, on each readiness check and after any NOSCRIPT, so
its SHA-1 in the cache of any primary means it ran since the cache was last emptied. One
started after the switch is seen at its first claim or readiness check, and every gateway of
this release goes back to format 1 within CHECK_EVERY seconds of that: a key it meets in
between, recorded in format 2, may run again (docs/production.md#upgrading says so). Once seen,
a mark in Redis keeps it so (the cache empties on a restart or a failover, the gateway may
still run): only `upgraded` clears it, after it emptied the cache and watched it stay free
of those scripts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import NoPermissionError, ResponseError

from gateway.store.failures import FAILURES
from gateway.store.formats import FORMAT_1, FORMAT_2, RecordFormat
from gateway.store.store import Store

log = logging.getLogger(__name__)

# SHA-1 of lua/claim.lua of every release that cannot read what this one writes, by the
# commit that changed it (the claim script is what each loads first and always): those that
# wrote format 1 only, and those of format 2's first layout (`core.layout.V2`), which read
# format 1 and that layout only.
EARLIER_CLAIM_SCRIPTS: Final = {
    "5eb9eb6ddeec9d4aeaf8ca93039e752e636ff1e2": "70a8e76",  # format 2's first layout
    "90b465de129c1cbf9687ee3c00fe4d33b9a3a047": "d8b76a7",
    "39300aadf0a189a202bd5c326e4a5a8970240e29": "b6c01c2",
    "6fc40b331726895b502dab7903a5c75df909f346": "f71b188",
    "798cf188fce1fc0833f0a7b90816ad89d7464277": "877829e",
    "3556ef8275be1e05515f95b3bee7779d1742b4d8": "08d4be2",
    "f809c0eb5aaa33e02edebdf83f3d2a1f7c1e45d0": "6680a77",
    "10fd9ede01403d655376de0ca4e8c0c346bb17c8": "da154b1",
    "01f4e2ec243121197949a1e62b15fcc25526a31d": "8e2039b",
}
CHECK_EVERY: Final = 5.0  # seconds between looks while format 2 is configured


def seen_key(prefix: str) -> str:
    """The mark that a gateway of an earlier release was seen: when, and how."""
    return f"{prefix}:earlier-release-seen"


def compact_key(prefix: str) -> str:
    """The mark that this Redis held no record of format 1 when a gateway first looked: when.
    Its loss costs a SCAN at the next start, never a wrong format."""
    return f"{prefix}:compact-since"


async def holds_format_1(client: Redis | RedisCluster, prefix: str) -> bool:
    """Whether Redis holds a key under a format-1 record's name (`prefix:{...}`, its hash
    tag right after the prefix), on any primary; marked when it holds none. Redis failures
    raise."""
    if await client.get(compact_key(prefix)) is not None:
        return False
    async for _ in client.scan_iter(match=f"{prefix}:{{*", count=1000):
        return True
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    await client.set(compact_key(prefix), when, nx=True)
    return False


@dataclass(frozen=True, slots=True)
class Sighting:
    """What the last look found: `seen` says why format 2 is held back ("" when it is not);
    `unknown` why no look could be made (Redis refused a command, or did not answer)."""

    seen: str = ""
    unknown: str = ""
    away: bool = False  # Redis did not answer: nothing was learnt


async def earlier_scripts(client: Redis | RedisCluster) -> list[str]:
    """The earlier releases' claim scripts loaded on any primary, by commit."""
    shas = list(EARLIER_CLAIM_SCRIPTS)
    replies: list[list[Any]] = []
    if isinstance(client, RedisCluster):
        for node in client.get_primaries():
            replies.append(await client.execute_command("SCRIPT EXISTS", *shas, target_nodes=node))
    else:
        replies.append(await client.script_exists(*shas))
    return [
        EARLIER_CLAIM_SCRIPTS[sha]
        for sha, *loaded in zip(shas, *replies, strict=True)
        if any(loaded)
    ]


async def look(store: Store, prefix: str, previous: Sighting) -> Sighting:
    """Whether a gateway of an earlier release was seen: marked so already, or its claim
    script loaded now (then marked, so that a restart of Redis does not forget it). Where
    Redis does not answer, the `previous` look stands (`away`); where it refuses the
    commands for good (an ACL, a managed service), no look can be made (`unknown`)."""
    client = store.client
    try:
        marked: Any = await client.get(seen_key(prefix))
        if marked is not None:
            return Sighting(seen=bytes(marked).decode("utf-8", "replace"))
        loaded = await earlier_scripts(client)
    except FAILURES as failed:
        if _refused_for_good(failed):
            return Sighting(unknown=f"{type(failed).__name__}: {failed}")
        return Sighting(seen=previous.seen, unknown=str(failed), away=True)
    if not loaded:
        return Sighting()
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    seen = f"the claim script of release {', '.join(loaded)} loaded, seen {when}"
    try:
        await client.set(seen_key(prefix), seen)
    except FAILURES as unmarked:  # a full Redis, say: seen all the same, marked at the next look
        log.warning("an earlier release's gateway seen, not marked yet: %s", unmarked)
    return Sighting(seen=seen)


def _refused_for_good(failure: BaseException) -> bool:
    """A command this Redis never runs for us: no permission, or no such command."""
    return isinstance(failure, NoPermissionError) or (
        isinstance(failure, ResponseError) and "unknown command" in str(failure).lower()
    )


class Fleet:
    """Holds `store.record_format` at what the config asks for (unset: format 2 where Redis
    holds no record of format 1, `holds_format_1`), or at 1 while a gateway of an earlier
    release is seen (or for as long as one may be: not looked yet)."""

    def __init__(
        self, store: Store, prefix: str, configured: RecordFormat | None, shared: bool
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.configured = configured
        self.shared = shared  # False: the embedded Redis, which no other gateway can use
        self.last = Sighting()
        self.legacy: bool | None = None  # unset: whether Redis holds format 1 (None: unknown)
        wanted = configured or FORMAT_2
        store.record_format = FORMAT_1 if wanted == FORMAT_2 and shared else wanted

    async def check(self) -> RecordFormat:
        """Look again and set the format written; the format now written."""
        if self.configured == FORMAT_1 or not self.shared:
            return self.store.record_format
        if self.configured is None and not await self._compact_here():
            return self.store.record_format  # format 1: an existing fleet's Redis, or unknown
        found = await look(self.store, self.prefix, self.last)
        if found.away:
            return self.store.record_format  # held as it was: 1 until a look is made
        if found.unknown and not self.last.unknown:
            log.warning(
                "%s: cannot tell whether a gateway of an earlier release uses this Redis "
                "(%s); writing format 2",
                self._asked(),
                found.unknown,
            )
        wanted = FORMAT_1 if found.seen else FORMAT_2
        if wanted != self.store.record_format or found.seen != self.last.seen:
            if found.seen:
                log.error(
                    "%s held at 1: a gateway of an earlier release uses this Redis (%s); once "
                    "every gateway runs this release, run `idem-gateway upgraded` "
                    "(docs/production.md#upgrading)",
                    self._asked(),
                    found.seen,
                )
            elif self.configured:
                log.warning("%s: writing format 2", self._asked())
            else:  # what a new deployment does, said at info level
                log.info("%s: writing format 2", self._asked())
        self.store.record_format = wanted
        self.last = found
        return wanted

    def _asked(self) -> str:
        return "redis.record_format 2" if self.configured else "redis.record_format unset"

    async def _compact_here(self) -> bool:
        """Whether an unset format may be 2 here: no record of format 1 in Redis (looked for
        once, until the look can be made)."""
        if self.legacy is None:
            try:
                self.legacy = await holds_format_1(self.store.client, self.prefix)
            except FAILURES as exc:
                log.warning("cannot tell yet whether this Redis holds records of format 1: %s", exc)
                return False
            if self.legacy:
                log.warning(
                    "redis.record_format unset: writing format 1, as this Redis holds records "
                    "of format 1 (an earlier release's, or written so); set it to 2 once every "
                    "gateway runs this release (docs/production.md#upgrading)"
                )
        return not self.legacy

    async def watch(self) -> None:
        """Check every CHECK_EVERY seconds, for as long as the gateway runs (where the format
        written may change)."""
        if self.configured == FORMAT_1 or not self.shared:
            return
        while True:
            await asyncio.sleep(CHECK_EVERY)
            await self.check()


async def declare_upgraded(client: Redis | RedisCluster, prefix: str, watch: float) -> list[str]:
    """Say that every gateway runs this release: empty every primary's script cache, watch
    it for `watch` seconds, and clear the mark if no earlier release's claim script comes
    back. The releases whose script came back (empty: cleared). Redis failures raise."""
    if isinstance(client, RedisCluster):
        for node in client.get_primaries():
            await client.execute_command("SCRIPT FLUSH", target_nodes=node)
    else:
        await client.script_flush()
    deadline = time.monotonic() + watch
    while True:
        loaded = await earlier_scripts(client)
        if loaded:
            return loaded
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    await client.delete(seen_key(prefix))
    return []
