"""The gateway's own RESP connection (`redis.pipeline_client: resp`) against a failing or
hostile Redis: each call gets its own answer or a store error within the socket timeout, never a
hang."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import uvloop

from gateway.config.settings import PipelineClient, RedisSettings
from gateway.core.claims import Claim
from gateway.errors import StoreUnavailable
from gateway.store.scripts import load_script
from gateway.store.store import Store
from testkit.polling import until
from testkit.redis_server import RedisServer
from testkit.stores import make_store

from .loopback import serving
from .resp_stores import redis_port, resp_store

# RESP3 out-of-band data (a client-side caching invalidation): never the reply to a command.
PUSH = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$10\r\nidem:{t:x}\r\n"


def pipelined_store(url: str, pipeline_client: PipelineClient) -> Store:
    """The RESP connection, or redis-py's (the reference) under the same batches."""
    settings = RedisSettings(connect_timeout=2.0, socket_timeout=2.0)
    return make_store(url, settings, pipeline=True, pipeline_client=pipeline_client)


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
        store = resp_store(own_redis.url, timeout=0.5)
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
            outcomes: list[Claim] = []

            async def claimed() -> bool:
                """A call succeeds (StoreUnavailable while no slot is free)."""
                try:
                    outcomes.append((await store.claim("idem:{t:free}", "f", "t", 30.0)).outcome)
                except StoreUnavailable:
                    return False
                return True

            await until(claimed, 5, "a call succeeding after a slot freed", every=0.05)
            (outcome,) = outcomes
        finally:
            await asyncio.wait_for(store.close(), 3)
        return errors, slowest, outcome

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        errors, slowest, outcome = runner.run(flow())
    assert len(errors) == 5
    assert all("max number of clients reached" in error for error in errors), errors
    assert slowest < 1.0
    assert outcome is Claim.CLAIMED


@pytest.mark.parametrize("pipeline_client", ["resp", "redis-py"])
async def test_a_push_frame_before_the_replies_shifts_no_answer_to_another_key(
    redis_url: str, pipeline_client: PipelineClient
) -> None:
    """A Redis (or a proxy) that sends a RESP3 push frame in front of a batch's replies: a
    push answers no command. Each call still gets its own key's answer, as redis-py gives
    (it sets pushes aside); matched to a call, every answer after it would be the previous
    key's."""
    setup = resp_store(redis_url)
    try:
        assert (await setup.claim("idem:{t:held}", "f", "owner", 30.0)).outcome is Claim.CLAIMED
    finally:
        await setup.close()
    pushed = 0

    async def pushing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        nonlocal pushed
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", redis_port(redis_url))
        asked = asyncio.Event()

        async def forward() -> None:
            while data := await reader.read(65536):
                if b"EVALSHA" in data:
                    asked.set()
                up_writer.write(data)
                await up_writer.drain()

        forwarding = asyncio.ensure_future(forward())
        try:
            while data := await up_reader.read(65536):
                if asked.is_set() and not pushed:
                    pushed += 1
                    data = PUSH + data
                writer.write(data)
                await writer.drain()
        finally:
            forwarding.cancel()
            up_writer.close()

    async with serving(pushing) as port:
        store = pipelined_store(f"redis://127.0.0.1:{port}/0", pipeline_client)
        try:
            held, fresh = await asyncio.gather(
                store.claim("idem:{t:held}", "f", "other", 30.0),
                store.claim("idem:{t:fresh}", "f", "mine", 30.0),
                return_exceptions=True,
            )
            after = await store.claim("idem:{t:after}", "f", "mine", 30.0)
        finally:
            await store.close()
    assert pushed == 1
    assert not isinstance(held, BaseException) and held.outcome is Claim.IN_FLIGHT, held
    assert not isinstance(fresh, BaseException) and fresh.outcome is Claim.CLAIMED, fresh
    assert after.outcome is Claim.CLAIMED
