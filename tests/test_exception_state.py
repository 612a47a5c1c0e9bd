"""No exception one task handles is left as the handled exception of others.

Compiled by mypyc, a coroutine keeps no exception state of its own: one that awaits while it
handles an exception leaves it as the handled exception of whatever runs it, and other tasks
chain it to their own exceptions (`build.contained`). Here the gateway handles Redis timeouts,
which reach its coroutines thrown in (as every timeout and cancellation does), and awaits in
its handlers, while the test's own task looks at `sys.exception()`. The pure build passes by
Python's own handling. tests/conftest.py also fails every test that leaves one behind."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from typing import Any

import pytest

from testkit.polling import until
from testkit.redis_server import RedisServer

from .faultkit import metrics_of, value
from .gateways import GatewayFactory, gateway_settings
from .upstream import CountingUpstream

REDIS = {"breaker": {"failures": 1000}, "socket_timeout": "300ms",
         "connect_timeout": "300ms", "pool_timeout": "300ms"}  # fmt: skip


async def seen_while(going_on: Callable[[], bool], timeout: float = 10) -> list[Any]:
    """What this task sees as its handled exception, at each turn of the loop meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen = []
    while going_on():
        assert loop.time() < deadline, "still going on"
        seen.append(sys.exception())
        await asyncio.sleep(0.002)
    return seen


def aiohttp_makes_its_own_tasks() -> None:
    """As aiohttp does on Python 3.12 and later (`asyncio.Task(..., eager_start=True)`): a
    connection's task and a request's are made without the loop's task factory."""
    loop = asyncio.get_running_loop()
    factory = loop.get_task_factory()

    def tasks(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> Any:
        if factory is None or getattr(coro, "__qualname__", "").startswith("RequestHandler."):
            return asyncio.Task(coro, loop=loop, **options)
        return factory(loop, coro, **options)

    loop.set_task_factory(tasks)


@pytest.mark.parametrize("tasks", ["factory", "aiohttp's own"])
async def test_a_timeout_handled_while_failing_open_is_no_other_tasks_exception(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    own_redis: RedisServer,
    tasks: str,
) -> None:
    """Redis hangs: the claim times out, and the handler, failing open, awaits the upstream
    from within its `except StoreUnavailable`."""
    counting, origin = upstream
    if tasks != "factory":
        aiohttp_makes_its_own_tasks()
    settings = gateway_settings(origin, redis=REDIS, fail_mode="open")
    client = await make_gateway(settings=settings, url=own_redis.url)
    assert own_redis.process is not None
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        answer = asyncio.ensure_future(
            client.post("/gate", data=b"x", headers={"Idempotency-Key": "a"})
        )
        await asyncio.wait_for(counting.entered.wait(), 10)  # the claim timed out meanwhile
        turns = iter(range(20))
        seen = await seen_while(lambda: next(turns, None) is not None)
        counting.release.set()
        assert (await answer).status == 201
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    assert seen == [None] * 20


async def test_an_outcome_kept_storing_in_the_background_is_no_other_tasks_exception(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], own_redis: RedisServer
) -> None:
    """Redis hangs once the upstream answered: the outcome is journaled, and a task keeps
    storing it, renewing its lease and pausing from within `except StoreUnavailable`."""
    counting, origin = upstream
    client = await make_gateway(settings=gateway_settings(origin, redis=REDIS), url=own_redis.url)
    metrics = metrics_of(client)
    assert own_redis.process is not None
    first = asyncio.ensure_future(client.post("/gate", data=b"x", headers={"Idempotency-Key": "a"}))
    await asyncio.wait_for(counting.entered.wait(), 10)
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        counting.release.set()
        assert (await first).status == 201  # journaled, then answered
        errors = value(metrics, "idem_redis_errors_total")
        seen = await seen_while(lambda: value(metrics, "idem_redis_errors_total") < errors + 3)
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    await until(lambda: value(metrics, "idem_journal_depth") == 0, timeout=10)
    assert seen and seen == [None] * len(seen)
