"""The pipelined store: concurrent calls share one round trip, each keeps its own answer."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from typing import cast

import pytest
import redis

from gateway.config.settings import PipelineClient, RedisSettings
from gateway.core.claims import Claim
from gateway.errors import StoreUnavailable
from gateway.store.redispy_pipeline import RedisPyPipeline
from gateway.store.resp_pipeline import RespPipeline
from gateway.store.store import Store
from testkit.redis_server import RedisServer
from testkit.stores import make_store

from .faultkit import redis_clients


@pytest.fixture(params=["resp", "redis-py"])
def pipeline_client(request: pytest.FixtureRequest) -> PipelineClient:
    """Pipelines on the gateway's own connection, or on redis-py's: each test runs on both."""
    return cast(PipelineClient, request.param)


def pipelined_store(
    url: str, pipeline_client: PipelineClient, pipeline: bool = True, timeout: float = 5.0
) -> Store:
    # Generous timeouts: the tests share a loaded machine and open many connections at once.
    settings = RedisSettings(connect_timeout=5.0, socket_timeout=timeout)
    store = make_store(
        url,
        settings,
        pipeline=pipeline,
        timeout=timeout,
        pipeline_client=pipeline_client,
    )
    if pipeline:
        assert isinstance(
            getattr(store.sender, "batches", None),
            RespPipeline if pipeline_client == "resp" else RedisPyPipeline,
        )
    return store


@pytest.mark.parametrize("pipeline", [True, False])
async def test_concurrent_claims_each_get_their_own_answer(
    redis_url: str, pipeline: bool, pipeline_client: PipelineClient
) -> None:
    store = pipelined_store(redis_url, pipeline_client, pipeline)
    try:
        # Twenty keys, five claimants each, all in the same loop turn.
        calls = [store.claim(f"idem:{{t:k{n % 20}}}", "fp", f"token{n}", 30.0) for n in range(100)]
        results = await asyncio.gather(*calls)
    finally:
        await store.close()
    outcomes = Counter(result.outcome for result in results)
    assert outcomes == {Claim.CLAIMED: 20, Claim.IN_FLIGHT: 80}
    assert all(r.pttl_ms > 0 for r in results if r.outcome is Claim.IN_FLIGHT)


async def test_one_loop_turn_of_calls_uses_one_connection(
    redis_url: str, pipeline_client: PipelineClient
) -> None:
    store = pipelined_store(redis_url, pipeline_client)
    try:
        await asyncio.gather(*(store.claim(f"idem:{{t:{i}}}", "f", "t", 30.0) for i in range(200)))
        assert redis_clients(redis_url) == 1
    finally:
        await store.close()
    direct = pipelined_store(redis_url, pipeline_client, pipeline=False)
    try:
        await asyncio.gather(*(direct.claim(f"idem:{{u:{i}}}", "f", "t", 30.0) for i in range(200)))
        assert redis_clients(redis_url) > 1  # the same load without coalescing
    finally:
        await direct.close()


async def test_an_error_reply_fails_only_its_own_call(
    redis_url: str, pipeline_client: PipelineClient
) -> None:
    store = pipelined_store(redis_url, pipeline_client)
    try:
        results = await asyncio.gather(
            store.claim("idem:{t:a}", "f", "t", 30.0),
            # A hold no TTL can be: PEXPIRE fails and the script stops with an error reply.
            store.claim("idem:{t:bad}", "f", "t", 30.0, hold=1e300),
            store.claim("idem:{t:b}", "f", "t", 30.0),
            return_exceptions=True,
        )
    finally:
        await store.close()
    assert results[0].outcome is Claim.CLAIMED
    assert isinstance(results[1], StoreUnavailable)
    assert "not an integer" in str(results[1])
    assert results[2].outcome is Claim.CLAIMED


async def test_forgotten_scripts_are_loaded_again(
    redis_url: str, pipeline_client: PipelineClient
) -> None:
    store = pipelined_store(redis_url, pipeline_client)
    try:
        assert (await store.claim("idem:{t:a}", "f", "t1", 30.0)).outcome is Claim.CLAIMED
        plain = redis.Redis.from_url(redis_url)
        plain.script_flush()
        plain.close()
        results = await asyncio.gather(
            store.claim("idem:{t:a}", "f", "t2", 30.0),
            store.release("idem:{t:a}", "t1"),
            store.claim("idem:{t:c}", "f", "t3", 30.0),
        )
    finally:
        await store.close()
    assert results[0].outcome is Claim.IN_FLIGHT
    assert results[1] is True
    assert results[2].outcome is Claim.CLAIMED


async def test_redis_down_fails_every_call_then_recovers(
    own_redis: RedisServer, pipeline_client: PipelineClient
) -> None:
    store = pipelined_store(own_redis.url, pipeline_client)
    try:
        assert (await store.claim("idem:{t:a}", "f", "t", 30.0)).outcome is Claim.CLAIMED
        own_redis.stop(kill=True)
        results = await asyncio.gather(
            *(store.claim(f"idem:{{t:{i}}}", "f", "t", 30.0) for i in range(10)),
            return_exceptions=True,
        )
        assert all(isinstance(r, StoreUnavailable) for r in results)
        own_redis.start()
        again = await store.claim("idem:{t:new}", "f", "t", 30.0)
        assert again.outcome is Claim.CLAIMED
    finally:
        await store.close()


async def test_a_hung_redis_fails_the_batch_at_the_deadline_then_recovers(
    own_redis: RedisServer, pipeline_client: PipelineClient
) -> None:
    store = pipelined_store(own_redis.url, pipeline_client, timeout=0.3)
    assert own_redis.process is not None
    try:
        assert (await store.claim("idem:{t:a}", "f", "t", 30.0)).outcome is Claim.CLAIMED
        own_redis.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            results = await asyncio.gather(
                *(store.claim(f"idem:{{t:{i}}}", "f", "t", 30.0) for i in range(10)),
                return_exceptions=True,
            )
            waited = time.monotonic() - started
        finally:
            own_redis.process.send_signal(signal.SIGCONT)
        assert all(isinstance(r, StoreUnavailable) for r in results)
        assert waited < 3.0  # one deadline for the batch, not one per call
        again = await store.claim("idem:{t:later}", "f", "t", 30.0)
        assert again.outcome is Claim.CLAIMED
    finally:
        await store.close()


@pytest.mark.parametrize("pipeline", [True, False])
async def test_an_argument_redis_cannot_take_is_a_store_error_either_way(
    redis_url: str, pipeline: bool, pipeline_client: PipelineClient
) -> None:
    """hiredis's packer (pipelined) and redis-py's (not) refuse the same arguments alike: as
    a Redis failure the store reports, never a bare TypeError, and the next call is fine."""
    store = pipelined_store(redis_url, pipeline_client, pipeline)
    try:
        with pytest.raises(StoreUnavailable, match="DataError"):
            await store._call(store._claim, "idem:{t:bad}", "f", "t", None, 0)
        assert (await store.claim("idem:{t:good}", "f", "t", 30.0)).outcome is Claim.CLAIMED
    finally:
        await store.close()


async def test_a_call_queued_behind_hung_batches_fails_within_one_timeout(
    own_redis: RedisServer, pipeline_client: PipelineClient
) -> None:
    """Both lanes are out with completions when Redis hangs: a claim made then waits in the
    queue, yet fails within one socket timeout of being made, not after the lanes' own."""
    timeout = 0.5
    store = pipelined_store(own_redis.url, pipeline_client, timeout=timeout)
    assert own_redis.process is not None and getattr(store.sender, "batches", None) is not None
    try:
        for n in range(2):  # two held connections, both open before the hang
            claimed = await store.claim(f"idem:{{t:{n}}}", "f", f"t{n}", 30.0)
            assert claimed.outcome is Claim.CLAIMED
        own_redis.process.send_signal(signal.SIGSTOP)
        try:
            lanes = []
            for n in range(2):  # one batch per loop turn: each goes out on a lane of its own
                lanes.append(asyncio.ensure_future(store.extend(f"idem:{{t:{n}}}", f"t{n}", 30.0)))
                while store.sender.batches._busy <= n or store.sender.batches._pending:
                    await asyncio.sleep(0)
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await store.claim("idem:{t:queued}", "f", "t", 30.0)
            waited = time.monotonic() - started
            await asyncio.gather(*lanes, return_exceptions=True)
        finally:
            own_redis.process.send_signal(signal.SIGCONT)
        assert waited < timeout + 0.25
        # The queued claim was given up before it was sent: Redis never ran it.
        assert (await store.claim("idem:{t:queued}", "f", "t2", 30.0)).outcome is Claim.CLAIMED
    finally:
        await store.close()


async def test_a_closed_store_refuses_calls_and_opens_no_connection(
    redis_url: str, pipeline_client: PipelineClient
) -> None:
    """After close, a call fails as a store error: the pipeline connects no more."""
    store = pipelined_store(redis_url, pipeline_client)
    assert (await store.claim("idem:{t:before}", "f", "t", 30.0)).outcome is Claim.CLAIMED
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.claim("idem:{t:after}", "f", "t", 30.0)
    assert redis_clients(redis_url) == 0
