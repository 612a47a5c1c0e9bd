"""An evicting Redis loses records and leases, and their keys run again: it is refused at
start, and /readyz and a metric report it, unless the operator accepts the risk."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import redis

from testkit.procs import GatewayProcess
from testkit.redis_server import RedisServer

from .upstream import CountingUpstream


@pytest.fixture
def evicting(own_redis: RedisServer) -> Iterator[RedisServer]:
    plain = redis.Redis.from_url(own_redis.url)
    plain.config_set("maxmemory-policy", "allkeys-lru")
    plain.close()
    yield own_redis


def config(origin: str, url: str, **redis_settings: object) -> dict[str, object]:
    return {
        "loop": "asyncio",
        "redis": {"url": url, **redis_settings},
        "admin": {},  # on a port the GatewayProcess holds
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }


async def test_an_evicting_redis_is_refused_at_start_with_one_line(
    upstream: tuple[CountingUpstream, str], evicting: RedisServer, tmp_path: Path
) -> None:
    gateway = GatewayProcess(config(upstream[1], evicting.url), tmp_path)
    assert gateway.exits() == 2
    log = gateway.log()
    assert "idem-gateway: cannot start: redis: maxmemory-policy allkeys-lru may evict" in log
    assert "Traceback" not in log


async def test_an_accepted_evicting_redis_runs_and_says_so(
    upstream: tuple[CountingUpstream, str], evicting: RedisServer, tmp_path: Path
) -> None:
    cfg = config(upstream[1], evicting.url, accept_eviction=True)
    gateway = GatewayProcess(cfg, tmp_path)
    await asyncio.to_thread(gateway.start)
    admin = f"http://127.0.0.1:{gateway.admin_port}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{admin}/readyz") as resp:
                assert resp.status == 200
                assert (await resp.json())["eviction_risk"] is True
            async with http.get(f"{admin}/metrics") as resp:
                assert "idem_redis_eviction_risk 1.0" in await resp.text()
    finally:
        gateway.stop()


async def test_a_policy_turned_evicting_at_run_time_fails_readiness(
    upstream: tuple[CountingUpstream, str], own_redis: RedisServer, tmp_path: Path
) -> None:
    cfg = config(upstream[1], own_redis.url)
    gateway = GatewayProcess(cfg, tmp_path)
    await asyncio.to_thread(gateway.start)
    admin = f"http://127.0.0.1:{gateway.admin_port}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{admin}/readyz") as resp:
                assert resp.status == 200
            plain = redis.Redis.from_url(own_redis.url)
            plain.config_set("maxmemory-policy", "volatile-lru")
            plain.close()
            async with http.get(f"{admin}/readyz") as resp:
                assert resp.status == 503
                assert (await resp.json())["eviction_risk"] is True
    finally:
        gateway.stop()
