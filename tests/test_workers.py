"""`--workers 2`: two processes share the port and one embedded Redis; exactly-once across them."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import aiohttp

from testkit.polling import wait_until
from testkit.procs import STARTS_WITHIN, GatewayProcess

from .upstream import CountingUpstream

KEYS = 150
SERVED = re.compile(r"worker pid (\d+) served (\d+) requests")
STARTED = re.compile(r"worker pid (\d+) started")
LISTENING = re.compile(r"idem-gateway listening on")


async def test_two_workers_share_the_port_and_keep_exactly_once(
    upstream: tuple[CountingUpstream, str], tmp_path: Path
) -> None:
    counting, origin = upstream
    config = {
        "redis": {"url": "embedded"},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path, args=["--workers", "2"])
    await asyncio.to_thread(gateway.start)
    statuses: Counter[tuple[int, bool]] = Counter()
    try:
        await asyncio.to_thread(
            wait_until,
            lambda: len(LISTENING.findall(gateway.log())) == 2,
            STARTS_WITHIN,
            "two listening",
        )
        workers = {int(pid) for pid in STARTED.findall(gateway.log())}
        # SIGHUP goes to the workers; they keep running (and reload, where supported).
        gateway.signal(signal.SIGHUP)
        # No keep-alive: each request is a new connection for the kernel to place.
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def send(key: str) -> None:
                async with session.post(
                    f"{gateway.url}/pay", data=key.encode(), headers={"Idempotency-Key": key}
                ) as resp:
                    await resp.read()
                    statuses[(resp.status, "Idempotent-Replayed" in resp.headers)] += 1

            # Each key twice at once: the twins may land on different workers.
            await asyncio.gather(*(send(f"key-{i // 2}") for i in range(KEYS * 2)))
            await asyncio.gather(*(send(f"key-{i}") for i in range(KEYS)))
        assert {int(pid) for pid in STARTED.findall(gateway.log())} == workers  # none died
    finally:
        code = await asyncio.to_thread(gateway.stop)
    assert code == 0, gateway.log()

    ran = Counter(counting.calls[("/pay", f"key-{i}")] for i in range(KEYS))
    assert ran == {1: KEYS}, f"upstream runs per key: {ran}"
    assert statuses[(201, False)] == KEYS
    assert statuses[(201, True)] + statuses[(409, False)] == KEYS * 2
    # On SIGTERM each worker drained and said how many answers it gave: both served.
    served = {int(pid): int(n) for pid, n in SERVED.findall(gateway.log())}
    assert served.keys() == workers, gateway.log()
    assert all(n > 0 for n in served.values()), served
    assert sum(served.values()) == KEYS * 3


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_dead_worker_is_replaced_and_workers_die_with_their_parent(
    redis_url: str, upstream: tuple[CountingUpstream, str], tmp_path: Path
) -> None:
    _, origin = upstream
    config = {
        "redis": {"url": redis_url},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path, args=["--workers", "2"])
    await asyncio.to_thread(gateway.start)
    try:
        await asyncio.to_thread(
            wait_until, lambda: len(STARTED.findall(gateway.log())) == 2, 10, "two workers"
        )
        first, second = (int(pid) for pid in STARTED.findall(gateway.log()))
        os.kill(first, signal.SIGKILL)
        await asyncio.to_thread(
            wait_until, lambda: len(STARTED.findall(gateway.log())) == 3, 10, "a new worker"
        )
        third = int(STARTED.findall(gateway.log())[2])
        await asyncio.to_thread(gateway.kill)  # the parent, as in a crash
        await asyncio.to_thread(
            wait_until,
            lambda: not _alive(second) and not _alive(third),
            10,
            "workers gone with their parent",
        )
    finally:
        gateway.stop()


WORKER = """
import os, signal, sys
fd = int(sys.argv[sys.argv.index("--ready-fd") + 1]) if "--ready-fd" in sys.argv else None
if fd is not None:
    os.write(fd, b"1")
signal.pause()  # serves until SIGTERM (its default: exit)
"""
SUPERVISE = """
import os, signal, sys
from gateway.ops.supervisor.workers import Supervisor
supervisor = Supervisor([sys.executable, "-c", sys.argv[1]], 3)
sys.exit(supervisor.run(on_ready=lambda: os.kill(os.getpid(), signal.SIGTERM)))
"""


def test_a_stop_right_after_the_first_worker_serves_starts_no_worker_left_running() -> None:
    """SIGTERM as the first worker serves, before the others are started (a test's own
    stop, a deploy's): no worker starts after the stop was passed on, to run on unstopped
    while the parent waits for it."""
    done = subprocess.run(
        [sys.executable, "-c", SUPERVISE, WORKER],
        capture_output=True,
        text=True,
        timeout=30,  # the parent hung here, waiting for workers started after the stop
        check=False,
    )
    assert done.returncode == 0, done.stderr
