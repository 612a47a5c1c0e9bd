"""The lean Redis connection (`redis.lean`) against a failing or hostile Redis: each call
gets its own answer or a store error within the socket timeout, never a hang."""

from __future__ import annotations

import asyncio
import time

import redis
import uvloop

from gateway.core.claims import Claim
from gateway.errors import StoreUnavailable
from gateway.store.store import load_script
from testkit.redis_server import RedisServer

from .test_lean_redis import lean_store


def test_a_redis_at_maxclients_fails_the_call_in_time_under_uvloop(
    own_redis: RedisServer,
) -> None:
    """Redis at `maxclients` accepts a connection, says so and closes it at once: on uvloop
    that can all arrive before the connect returns. The call fails with Redis's reason
    within the socket timeout, and once a client slot is free the next call succeeds."""
    holder = redis.Redis.from_url(own_redis.url)
    for name in ("claim", "extend", "complete", "release", "resolve"):
        holder.script_load(load_script(name))  # no reload, on a second connection, needed
    holder.config_set("maxclients", 1)  # this connection is the one client Redis takes

    async def flow() -> tuple[list[str], float, Claim]:
        store = lean_store(own_redis.url, timeout=0.5)
        errors: list[str] = []
        slowest = 0.0
        try:
            for n in range(5):
                started = time.monotonic()
                try:
                    await asyncio.wait_for(store.claim(f"idem:{{t:{n}}}", "f", "t", 30.0), 3)
                except StoreUnavailable as exc:
                    errors.append(str(exc))
                slowest = max(slowest, time.monotonic() - started)
            holder.close()  # a slot frees up
            deadline = time.monotonic() + 5
            while True:
                try:
                    outcome = (await store.claim("idem:{t:free}", "f", "t", 30.0)).outcome
                    break
                except StoreUnavailable:
                    assert time.monotonic() < deadline, "no call succeeded after a slot freed"
                    await asyncio.sleep(0.05)
        finally:
            await asyncio.wait_for(store.close(), 3)
        return errors, slowest, outcome

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        errors, slowest, outcome = runner.run(flow())
    assert len(errors) == 5
    assert all("max number of clients reached" in error for error in errors), errors
    assert slowest < 1.0
    assert outcome is Claim.CLAIMED
