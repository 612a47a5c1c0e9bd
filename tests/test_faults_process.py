"""The gateway as a real process: SIGKILL mid-request, and a graceful SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from testkit.polling import until
from testkit.procs import GatewayProcess
from testkit.redis_server import RedisServer

from .faultkit import records
from .lostowner import process_config
from .upstream import CountingUpstream

LEASE = 2.0
KEY = {"Idempotency-Key": "k-proc"}


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[list[GatewayProcess]]:
    """Gateway processes a test starts; whatever is still running is stopped after it."""
    started: list[GatewayProcess] = []
    yield started
    for gateway in started:
        if gateway.process is not None and gateway.process.poll() is None:
            gateway.kill()


async def start(gateways: list[GatewayProcess], *procs: GatewayProcess) -> None:
    gateways.extend(procs)
    await asyncio.gather(*(asyncio.to_thread(proc.start) for proc in procs))


def refuses(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return False
    except OSError:
        return True


async def test_sigkill_mid_request_keeps_the_key_until_the_lease_ends(
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    tmp_path: Path,
    gateways: list[GatewayProcess],
) -> None:
    counting, origin = upstream
    victim = GatewayProcess(process_config(origin, redis_url, lease=f"{LEASE}s"), tmp_path)
    survivor = GatewayProcess(process_config(origin, redis_url, lease=f"{LEASE}s"), tmp_path)
    await start(gateways, victim, survivor)
    async with aiohttp.ClientSession() as session:
        first = asyncio.ensure_future(session.post(f"{victim.url}/gate", data=b"x", headers=KEY))
        await counting.entered.wait()
        await asyncio.to_thread(victim.kill)
        killed_at = time.monotonic()
        with pytest.raises(aiohttp.ClientError):
            await first
        counting.release.set()  # the orphaned upstream call may end now; nobody records it

        # The key stays PENDING: retries get 409 until the lease runs out ...
        [record] = records(redis_url)
        assert record[b"s"] == b"P"
        statuses: list[int] = []

        async def claimed() -> bool:
            resp = await session.post(f"{survivor.url}/gate", data=b"x", headers=KEY)
            statuses.append(resp.status)
            await resp.read()
            return resp.status != 409

        await until(claimed, timeout=LEASE + 8, every=0.1)
        recovered_after = time.monotonic() - killed_at
        assert statuses[0] == 409
        assert set(statuses[:-1]) == {409}
        # ... then the next request claims it and runs: the owner died, so it runs again.
        assert statuses[-1] == 201
        assert recovered_after < LEASE + 5
        assert counting.count("/gate") == 2
        replay = await session.post(f"{survivor.url}/gate", data=b"x", headers=KEY)
        assert replay.headers["Idempotent-Replayed"] == "true"
        assert counting.count("/gate") == 2


async def test_sigterm_finishes_in_flight_requests_then_exits_0(
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    tmp_path: Path,
    gateways: list[GatewayProcess],
) -> None:
    counting, origin = upstream
    gateway = GatewayProcess(process_config(origin, redis_url), tmp_path)
    await start(gateways, gateway)
    async with aiohttp.ClientSession() as session:
        first = asyncio.ensure_future(session.post(f"{gateway.url}/gate", data=b"x", headers=KEY))
        await counting.entered.wait()
        gateway.signal(signal.SIGTERM)
        # It stops accepting new connections while the request is held upstream ...
        await until(lambda: refuses(gateway.port), timeout=10)
        assert gateway.process is not None and gateway.process.poll() is None
        counting.release.set()
        # ... finishes the request ...
        answer = await first
        assert answer.status == 201
        body = await answer.read()
    # ... records its outcome and exits 0.
    assert await asyncio.to_thread(gateway.process.wait, 20) == 0
    [record] = records(redis_url)
    assert record[b"s"] == b"C"
    assert record[b"b"] == body
    assert counting.count("/gate") == 1
    assert "Traceback" not in gateway.log()


@pytest.mark.parametrize(("first", "successor"), [(1, 1), (1, 2), (2, 1)])
async def test_a_journaled_outcome_survives_a_gateway_sigkill(
    upstream: tuple[CountingUpstream, str],
    own_redis: RedisServer,
    tmp_path: Path,
    state_dir: Path,
    gateways: list[GatewayProcess],
    first: int,
    successor: int,
) -> None:
    """Redis hangs while the answer is stored: the outcome goes to the journal (fsynced)
    and the client gets its answer; the gateway is SIGKILLed before Redis is back. The next
    gateway replays the journal before it serves, so the retry is a replay: one run, in
    whichever record format each of the two writes."""
    counting, origin = upstream
    cfg = process_config(origin, own_redis.url, lease="30s")
    cfg["redis"].update(socket_timeout="300ms", breaker={"failures": 1000}, record_format=first)
    gateway = GatewayProcess(cfg, tmp_path)
    await start(gateways, gateway)
    assert own_redis.process is not None
    async with aiohttp.ClientSession() as session:
        first = asyncio.ensure_future(session.post(f"{gateway.url}/gate", data=b"x", headers=KEY))
        await counting.entered.wait()
        own_redis.process.send_signal(signal.SIGSTOP)
        try:
            counting.release.set()
            answer = await asyncio.wait_for(first, timeout=10)
            assert answer.status == 201
            body = await answer.read()
            await asyncio.to_thread(gateway.kill)
        finally:
            own_redis.process.send_signal(signal.SIGCONT)
        # The outcome is in the dead gateway's journal (Redis may or may not have the write
        # that was in flight when it hung: either way the retry must be a replay).
        [journal] = list((state_dir / "journal").glob("*.jsonl"))
        assert b'"token"' in journal.read_bytes()
        then = process_config(origin, own_redis.url, lease="30s")
        then["redis"]["record_format"] = successor
        replaying = GatewayProcess(then, tmp_path)
        await start(gateways, replaying)
        async with session.post(f"{replaying.url}/gate", data=b"x", headers=KEY) as retry:
            assert retry.status == 201
            assert retry.headers["Idempotent-Replayed"] == "true"
            assert await retry.read() == body
    assert counting.count("/gate") == 1
    assert not journal.exists()  # replayed and removed by the successor
