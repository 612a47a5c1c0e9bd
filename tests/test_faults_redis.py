"""Redis faults: killed and restarted, hung (SIGSTOP), scripts flushed."""

from __future__ import annotations

import asyncio
import itertools
import signal
import time

import pytest
import redis

from testkit.polling import until
from testkit.redis_server import RedisServer

from .faultkit import fill_to_maxmemory, metrics_of, records, value
from .gateways import GatewayFactory, gateway_settings
from .upstream import CountingUpstream

REDIS = {"breaker": {"failures": 2, "reset": "200ms"}, "socket_timeout": "300ms",
         "connect_timeout": "300ms", "pool_timeout": "300ms"}  # fmt: skip
keys = (f"k-{n}" for n in itertools.count())


@pytest.mark.parametrize("pipeline_client", ["resp", "redis-py"])
async def test_redis_killed_and_restarted(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    own_redis: RedisServer,
    pipeline_client: str,
) -> None:
    counting, origin = upstream
    redis = {**REDIS, "pipeline_client": pipeline_client}
    client = await make_gateway(settings=gateway_settings(origin, redis=redis), url=own_redis.url)
    before = next(keys)
    assert (await client.post("/pay", data=b"x", headers={"Idempotency-Key": before})).status == 201
    await until(lambda: b"C" in (r.get(b"s") for r in records(own_redis.url)))

    own_redis.stop(kill=True)
    for _ in range(6):  # closed mode: 503 with Retry-After, and the upstream is not called
        resp = await client.post("/pay", data=b"x", headers={"Idempotency-Key": next(keys)})
        assert resp.status == 503
        assert resp.headers["Retry-After"].isdigit()
    assert counting.count("/pay") == 1

    own_redis.start()
    # Service resumes by itself: the breaker probes and the pool reconnects.
    after = next(keys)

    async def served() -> bool:
        resp = await client.post("/pay", data=b"x", headers={"Idempotency-Key": after})
        return resp.status == 201

    await until(served, timeout=10, every=0.05)
    for _ in range(3):
        again = await client.post("/pay", data=b"x", headers={"Idempotency-Key": after})
        assert again.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/pay", after) == 1
    assert counting.count("/pay") == 2


@pytest.mark.parametrize("pipeline_client", ["resp", "redis-py"])
async def test_hung_redis_gives_bounded_503s(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    own_redis: RedisServer,
    pipeline_client: str,
) -> None:
    counting, origin = upstream
    redis = {**REDIS, "pipeline_client": pipeline_client}
    client = await make_gateway(settings=gateway_settings(origin, redis=redis), url=own_redis.url)
    assert (await client.post("/pay", data=b"x", headers={"Idempotency-Key": "warm"})).status == 201
    await until(lambda: b"C" in (r.get(b"s") for r in records(own_redis.url)))
    assert own_redis.process is not None
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        answers = await asyncio.gather(
            *(client.post("/pay", data=b"x", headers={"Idempotency-Key": next(keys)})
              for _ in range(5))
        )  # fmt: skip
        elapsed = time.monotonic() - started
        assert [a.status for a in answers] == [503] * 5
        # Bounded by the socket timeout and one retry, not by the hung server.
        assert elapsed < 3.0
        assert counting.count("/pay") == 1
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    fresh = next(keys)

    async def served() -> bool:
        resp = await client.post("/pay", data=b"x", headers={"Idempotency-Key": fresh})
        return resp.status == 201

    await until(served, timeout=10, every=0.05)
    assert counting.count("/pay", fresh) == 1


async def test_script_flush_is_handled(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    assert (await client.post("/pay", data=b"x", headers={"Idempotency-Key": "a"})).status == 201
    direct = redis.Redis.from_url(redis_url)
    try:
        direct.script_flush()
    finally:
        direct.close()
    resp = await client.post("/pay", data=b"x", headers={"Idempotency-Key": "b"})
    assert resp.status == 201
    replay = await client.post("/pay", data=b"x", headers={"Idempotency-Key": "a"})
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/pay") == 2


@pytest.mark.parametrize("pipeline_client", ["resp", "redis-py"])
async def test_a_pause_shorter_than_the_lease_runs_nothing_twice(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    own_redis: RedisServer,
    pipeline_client: str,
) -> None:
    """Redis hangs for 2 s, longer than the breaker's patience, between the upstream's answer
    and its recording (lease 3 s): the outcome is journaled, the client gets its answer, the
    breaker refuses new claims but not the storing, and once Redis is back the outcome is
    stored before any retry can claim the key."""
    counting, origin = upstream
    settings = gateway_settings(
        origin, redis={**REDIS, "pipeline_client": pipeline_client}, lease="3s"
    )
    client = await make_gateway(settings=settings, url=own_redis.url)
    metrics = metrics_of(client)
    assert own_redis.process is not None
    first = asyncio.ensure_future(client.post("/gate", data=b"x", headers={"Idempotency-Key": "a"}))
    await counting.entered.wait()
    paused = time.monotonic()
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        counting.release.set()
        answer = await asyncio.wait_for(first, timeout=5)  # durable in the journal, answered
        assert answer.status == 201
        body = await answer.read()
        assert value(metrics, "idem_outcomes_unstored_total", route="api") == 1
        assert value(metrics, "idem_journal_depth") == 1
        # Meanwhile retries and other requests are answered 503 in bounded time.
        started = time.monotonic()
        retry = await client.post("/gate", data=b"x", headers={"Idempotency-Key": "a"})
        assert retry.status == 503
        assert time.monotonic() - started < 3.0
        await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - paused)))  # the pause itself
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    await until(lambda: value(metrics, "idem_journal_depth") == 0, timeout=10)
    [record] = [r for r in records(own_redis.url) if r.get(b"s") == b"C"]
    assert record[b"b"] == body
    replay = await client.post("/gate", data=b"x", headers={"Idempotency-Key": "a"})
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert await replay.read() == body
    assert counting.count("/gate") == 1


@pytest.mark.parametrize("path", ["/gate", "/blob?size=100000&gate=1"])
async def test_an_answer_is_stored_on_a_full_redis_and_never_run_again(
    path: str,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    own_redis: RedisServer,
) -> None:
    """`noeviction` Redis at maxmemory while the answer is stored (inline and in the blob
    store): the outcome is stored all the same, new claims get 503, the retry is a replay."""
    counting, origin = upstream
    client = await make_gateway(settings=gateway_settings(origin, redis=REDIS), url=own_redis.url)
    metrics = metrics_of(client)
    first = asyncio.ensure_future(client.post(path, data=b"x", headers={"Idempotency-Key": "f"}))
    await counting.entered.wait()
    plain = redis.Redis.from_url(own_redis.url)
    try:
        fill_to_maxmemory(plain)
        counting.release.set()
        answer = await first
        assert answer.status == (200 if path.startswith("/blob") else 201)
        body = await answer.read()
        # Held full: below the memory in use, as freed buffers could let a small claim in at
        # the very edge where the answer was stored.
        plain.config_set("maxmemory", int(plain.info("memory")["used_memory"]) // 2)
        other = await client.post("/pay", data=b"x", headers={"Idempotency-Key": "new"})
        assert other.status == 503
        retry = await client.post(path, data=b"x", headers={"Idempotency-Key": "f"})
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert await retry.read() == body
    finally:
        plain.config_set("maxmemory", 0)
        plain.close()
    assert value(metrics, "idem_outcomes_unstored_total", route="api") in (None, 0)
    assert counting.count(path.split("?")[0]) == 1
