"""Exactly once under concurrency: many duplicates at the same moment."""

from __future__ import annotations

import asyncio
import random

import aiohttp

from .gateways import GatewayFactory

# The client, the gateway and the upstream share one process and its loop: with hundreds of
# requests queued in it on a busy machine, Redis's replies are read seconds after the calls
# that the default socket timeout (1 s) would fail with a 503. These tests are about who
# runs once, not about a slow Redis (tests/test_faults_hung.py is), so Redis gets the time.
PATIENT_REDIS = {"socket_timeout": "20s"}


async def test_200_concurrent_duplicates_run_once(make_gateway: GatewayFactory, upstream) -> None:
    counting, _ = upstream
    client = await make_gateway(redis=PATIENT_REDIS)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        url = str(client.make_url("/pay"))
        start = asyncio.Event()

        async def one() -> tuple[int, bytes]:
            await start.wait()
            async with session.post(url, data=b"amount=5", headers={"Idempotency-Key": "one"}) as r:
                return r.status, await r.read()

        tasks = [asyncio.ensure_future(one()) for _ in range(200)]
        start.set()
        results = await asyncio.gather(*tasks)
    assert counting.count("/pay", "one") == 1
    recorded = {body for status, body in results if status == 201}
    assert len(recorded) == 1, "every 201 carries the one recorded body"
    assert {status for status, _ in results} <= {201, 409}
    assert sum(status == 201 for status, _ in results) >= 1


async def test_2000_requests_over_200_keys_run_each_key_once(
    make_gateway: GatewayFactory, upstream
) -> None:
    counting, _ = upstream
    client = await make_gateway(redis=PATIENT_REDIS)
    keys = [f"key-{i}" for i in range(200)]
    plan = [key for key in keys for _ in range(20)]
    random.Random(7).shuffle(plan)
    connector = aiohttp.TCPConnector(limit=200)
    bodies: dict[str, set[bytes]] = {key: set() for key in keys}
    statuses: set[int] = set()
    async with aiohttp.ClientSession(connector=connector) as session:
        url = str(client.make_url("/pay"))

        async def one(key: str) -> None:
            async with session.post(url, data=key.encode(), headers={"Idempotency-Key": key}) as r:
                statuses.add(r.status)
                if r.status == 201:
                    bodies[key].add(await r.read())

        await asyncio.gather(*(one(key) for key in plan))
    assert statuses <= {201, 409}
    for key in keys:
        assert counting.count("/pay", key) == 1, key
        assert len(bodies[key]) <= 1, key
    # Every key is completed: one more retry of each is a replay.
    async with aiohttp.ClientSession() as session:
        for key in keys[:20]:
            async with session.post(
                str(client.make_url("/pay")), data=key.encode(), headers={"Idempotency-Key": key}
            ) as r:
                assert r.status == 201 and r.headers["Idempotent-Replayed"] == "true"
                assert {await r.read()} == bodies[key] or not bodies[key]
    assert sum(counting.calls.values()) == 200
