"""`--workers N` with an admin listener: one admin port per worker, metrics that add up."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import aiohttp

from gateway.ops.admin import MAX_WORKERS
from testkit.ports import free_port
from testkit.procs import GatewayProcess

from .scrape import sample
from .upstream import CountingUpstream

ADMIN = re.compile(r"admin listener on http://127\.0\.0\.1:(\d+)")
REQUESTS = 20


async def test_each_worker_has_an_admin_port_and_their_counts_add_up(
    upstream: tuple[CountingUpstream, str], redis_url: str, tmp_path: Path
) -> None:
    _, origin = upstream
    admin_port = free_port()
    config = {
        "redis": {"url": redis_url},
        "admin": {"port": admin_port},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path, args=["--workers", "2"])
    await asyncio.to_thread(gateway.start)
    try:
        deadline = time.monotonic() + 15
        while len(ports := {int(p) for p in ADMIN.findall(gateway.log())}) < 2:
            assert time.monotonic() < deadline, gateway.log()
            await asyncio.sleep(0.02)
        assert admin_port in ports
        assert all(admin_port <= p < admin_port + MAX_WORKERS for p in ports)

        connector = aiohttp.TCPConnector(force_close=True)  # let the kernel spread them
        async with aiohttp.ClientSession(connector=connector) as http:
            for i in range(REQUESTS):
                headers = {"Idempotency-Key": f"w-{i}"}
                async with http.post(f"{gateway.url}/pay", headers=headers) as resp:
                    assert resp.status == 201
            total = 0.0
            for port in ports:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    assert resp.status == 200
                async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    text = await resp.text()
                total += sample(text, "idem_requests_total", outcome="forwarded")
        assert total == REQUESTS  # each worker counts its own; the sum is every request
    finally:
        assert await asyncio.to_thread(gateway.stop) == 0
