"""A hung Redis (SIGSTOP) under load: the first 503 comes within one socket timeout, with the
plain client and with the pipelined one, even while storing answers holds its connections."""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.http.app import SERVICES
from gateway.store.redispy_pipeline import RedisPyPipeline
from gateway.store.resp_pipeline import RespPipeline
from testkit.polling import until
from testkit.redis_server import RedisServer

from .faultkit import metrics_of, records, value
from .gateways import GatewayFactory, gateway_settings
from .upstream import serving_app

SOCKET_TIMEOUT = 1.0
# Scheduling on a shared machine: the event loop, the test client and the gateway share a core.
MARGIN = 0.5


class HeldUpstream:
    """`/hold/<group>` answers 201 once its group is released; `/pay` at once. Counts calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.groups = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def hold(self, request: web.Request) -> web.Response:
        self.calls[request.path] += 1
        await self.groups[request.match_info["group"]].wait()
        return web.Response(status=201, text="held")

    async def pay(self, request: web.Request) -> web.Response:
        self.calls[request.path] += 1
        return web.Response(status=201, text="paid")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/hold/{group}", self.hold)
        app.router.add_post("/pay", self.pay)
        return app


@pytest.fixture
async def held() -> AsyncIterator[tuple[HeldUpstream, str]]:
    upstream = HeldUpstream()
    async with serving_app(upstream.app()) as origin:
        yield upstream, origin
        for event in upstream.groups.values():
            event.set()


async def _until_first_503(client: TestClient, paused: float) -> float:
    """Keep four new keys in flight until one is answered 503; the seconds since `paused`."""
    first: list[float] = []
    keys = itertools.count()

    async def sender() -> None:
        while not first:
            resp = await client.post("/pay", headers={"Idempotency-Key": f"k-{next(keys)}"})
            if resp.status == 503 and not first:
                first.append(time.monotonic() - paused)

    await asyncio.wait_for(asyncio.gather(*(sender() for _ in range(4))), timeout=15)
    return first[0]


def _stores_out(client: TestClient, lanes: int) -> bool:
    """Whether `lanes` pipelined batches are out and nothing waits to join them (always true
    for the plain client, which has no batches)."""
    batch = getattr(client.server.app[SERVICES].store.sender, "batches", None)
    return batch is None or (batch._busy >= lanes and not batch._pending)


@pytest.mark.parametrize(
    ("pipeline", "pipeline_client"), [(True, "resp"), (True, "redis-py"), (False, "redis-py")],
    ids=["resp", "pipelined", "plain"],
)  # fmt: skip
async def test_a_hung_redis_gives_its_first_503_within_one_socket_timeout(
    pipeline: bool,
    pipeline_client: str,
    make_gateway: GatewayFactory,
    held: tuple[HeldUpstream, str],
    own_redis: RedisServer,
) -> None:
    upstream, origin = held
    redis = {
        "socket_timeout": f"{SOCKET_TIMEOUT}s",
        "pipeline": pipeline,
        "pipeline_client": pipeline_client,
    }
    client = await make_gateway(settings=gateway_settings(origin, redis=redis), url=own_redis.url)
    batch = getattr(client.server.app[SERVICES].store.sender, "batches", None)
    assert type(batch) is {(True, "resp"): RespPipeline, (True, "redis-py"): RedisPyPipeline}.get(
        (pipeline, pipeline_client), type(None)
    )
    # Answers held in the upstream, in two groups: when Redis hangs, storing them keeps every
    # pipelined batch out (one group per batch) while new claims arrive.
    answers = [
        asyncio.ensure_future(
            client.post(f"/hold/{group}", headers={"Idempotency-Key": f"{group}-{n}"})
        )
        for group in "ab"
        for n in range(3)
    ]
    await until(lambda: sum(upstream.calls.values()) == 6)
    assert own_redis.process is not None
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        paused = time.monotonic()
        for lanes, group in enumerate("ab", start=1):
            upstream.groups[group].set()
            await until(lambda lanes=lanes: _stores_out(client, lanes), every=0.001)
        elapsed = await _until_first_503(client, paused)
        # The held answers are journaled and answered meanwhile.
        assert {resp.status for resp in await asyncio.gather(*answers)} == {201}
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    await until(lambda: value(metrics_of(client), "idem_journal_depth") == 0)
    print(f"first 503 after {elapsed:.3f}s (pipeline={pipeline})")
    assert elapsed < SOCKET_TIMEOUT + MARGIN
    assert upstream.calls["/pay"] == 0  # nothing claimed during the pause reached the upstream
    assert sum(r.get(b"s") == b"C" for r in records(own_redis.url)) == 6
