"""Redis faults: killed and restarted, hung (SIGSTOP), scripts flushed."""

from __future__ import annotations

import asyncio
import itertools
import signal
import time

import redis

from gateway.store.embedded import RedisServer

from .conftest import GatewayFactory, gateway_settings
from .faultkit import metrics_of, records, until, value
from .upstream import CountingUpstream

REDIS = {"breaker": {"failures": 2, "reset": "200ms"}, "socket_timeout": "300ms",
         "connect_timeout": "300ms", "pool_timeout": "300ms"}  # fmt: skip
keys = (f"k-{n}" for n in itertools.count())


async def test_redis_killed_and_restarted(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], own_redis: RedisServer
) -> None:
    counting, origin = upstream
    client = await make_gateway(settings=gateway_settings(origin, redis=REDIS), url=own_redis.url)
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


async def test_hung_redis_gives_bounded_503s(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], own_redis: RedisServer
) -> None:
    counting, origin = upstream
    client = await make_gateway(settings=gateway_settings(origin, redis=REDIS), url=own_redis.url)
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


async def test_answer_completes_only_once_its_outcome_is_stored(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], own_redis: RedisServer
) -> None:
    """Redis hangs between the upstream's answer and its recording: the client's answer is
    held until the outcome is stored, while other requests get bounded 503s."""
    counting, origin = upstream
    settings = gateway_settings(origin, redis=REDIS, lease="30s")
    client = await make_gateway(settings=settings, url=own_redis.url)
    metrics = metrics_of(client)
    assert own_redis.process is not None
    first = asyncio.ensure_future(client.post("/gate", data=b"x", headers={"Idempotency-Key": "a"}))
    await counting.entered.wait()
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        counting.release.set()
        # The gateway has the answer and fails to store it (no renewal is due for 10 s) ...
        await until(lambda: value(metrics, "idem_redis_errors_total") > 0, timeout=10)
        assert not first.done()
        # ... and meanwhile other requests are answered 503 in bounded time.
        started = time.monotonic()
        other = await client.post("/pay", data=b"x", headers={"Idempotency-Key": "b"})
        assert other.status == 503
        assert time.monotonic() - started < 3.0
        assert not first.done()
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    answer = await first
    assert answer.status == 201
    body = await answer.read()
    [record] = [r for r in records(own_redis.url) if r.get(b"s") == b"C"]
    assert record[b"b"] == body
    replay = await client.post("/gate", data=b"x", headers={"Idempotency-Key": "a"})
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert await replay.read() == body
    assert counting.count("/gate") == 1
