"""A gateway that stood still (stopped, starved): its Redis calls that timed out meanwhile are
not Redis's failures, and a route that fails open does not forward a request held through
the stall, which its client may have retried at another gateway meanwhile."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import orjson
import pytest

from gateway.errors import StoreUnavailable
from gateway.store.breaker import CLOSED, CircuitBreaker
from gateway.store.stalls import STALL, Stalls
from gateway.telemetry.logs import FIELDS
from testkit.polling import until
from testkit.redis_server import RedisServer
from testkit.stores import make_store

from .gateways import GatewayFactory, gateway_settings
from .upstream import CountingUpstream


@pytest.fixture
def hung_redis() -> Iterator[RedisServer]:
    """A redis-server that takes connections and answers nothing (SIGSTOP) until the end."""
    server = RedisServer()
    server.start()
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield server
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.close()


def stand_still(seconds: float) -> None:
    """Hold the running loop for `seconds`: this process does nothing meanwhile, as when it
    is stopped or starved."""
    asyncio.get_running_loop().call_soon(time.sleep, seconds)


async def test_a_late_timer_is_a_stall_and_an_on_time_one_is_not() -> None:
    stalls = Stalls()
    stalls.start()
    try:
        before = time.monotonic()
        await asyncio.sleep(0.35)  # three ticks, each on time
        assert not stalls.held_through(before) and not stalls.within(60)
        stand_still(STALL + 0.3)
        await asyncio.sleep(0.2)  # the first tick after it, late
        assert stalls.held_through(before) and stalls.within(1.0)
        assert not stalls.held_through(time.monotonic())
    finally:
        stalls.stop()


async def test_a_call_that_timed_out_while_the_process_stood_still_opens_no_breaker(
    hung_redis: RedisServer,
) -> None:
    store = make_store(hung_redis.url, breaker=CircuitBreaker(1, 30.0), timeout=0.3)
    store.stalls.start()
    try:
        stand_still(STALL + 0.5)  # the call's timeout fires late: no sign of Redis
        with pytest.raises(StoreUnavailable):
            await store.claim("idem:{a}", "f", "t", 5)
        assert store.circuit.state == CLOSED
        with pytest.raises(StoreUnavailable):  # on time: Redis's failure, counted
            await store.claim("idem:{b}", "f", "t", 5)
        assert store.circuit.state != CLOSED
    finally:
        store.stalls.stop()
        await store.close()


def unread(port: int) -> int:
    """The bytes sent to `port` on loopback and not read yet (the hung Redis reads none)."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(int(row[4].split(":")[1], 16) for row in rows if row[1].endswith(f":{port:04X}"))


@pytest.mark.parametrize(
    ("stall", "event"),
    [(None, "failed-open"), ("before", "after-stall"), ("during", "held-through-stall")],
    ids=["on-time", "come-after-a-stall", "held-through-a-stall"],
)
async def test_a_failing_open_route_forwards_nothing_held_through_a_stall(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    hung_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
    stall: str | None,
    event: str,
) -> None:
    """Each answer's log line names what happened in its `event` field, with the route and
    the request's id, whatever its message says."""
    counting, origin = upstream
    redis = {"socket_timeout": "300ms", "pipeline": False}
    settings = gateway_settings(origin, redis=redis, fail_mode="open", lease="2s")
    client = await make_gateway(settings, url=hung_redis.url)
    if stall == "before":
        stand_still(STALL + 0.5)
    sent_before = unread(hung_redis.port)
    headers = {"Idempotency-Key": "k", "X-Request-Id": "r-1"}
    asked = asyncio.ensure_future(client.post("/pay", data=b"x", headers=headers))
    if stall == "during":  # once the claim is in Redis's socket, unanswered
        await until(lambda: unread(hung_redis.port) > sent_before, timeout=5)
        stand_still(STALL + 0.5)
    answer = await asked
    if stall is not None:
        assert answer.status == 503
        assert orjson.loads(await answer.read())["code"] == "store-unavailable"
        assert counting.count("/pay") == 0
    else:  # Redis unreachable, the gateway on time: forwarded without idempotency, marked
        assert answer.status == 201 and answer.headers["Idempotency-Degraded"] == "true"
        assert counting.count("/pay") == 1
    said = [getattr(r, FIELDS) for r in caplog.records if "event" in getattr(r, FIELDS, {})]
    assert said == [{"event": event, "route": "api", "request_id": "r-1"}]
