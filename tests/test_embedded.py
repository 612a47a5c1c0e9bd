"""The embedded redis-server lives and dies with its gateway."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp

from testkit.procs import GatewayProcess


def children(pid: int, name: str) -> list[int]:
    """PIDs of the processes named `name` whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == pid and comm.startswith(name):
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has exited


async def test_embedded_redis_stops_when_the_gateway_is_killed(upstream, tmp_path: Path) -> None:
    _, origin = upstream
    config = {
        "redis": {"url": "embedded"},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path).start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{gateway.url}/pay", data=b"x", headers={"Idempotency-Key": "e"}) as r,
        ):
            assert r.status == 201
        assert gateway.process is not None
        (redis_pid,) = children(gateway.process.pid, "redis-server")
        assert os.getsid(redis_pid) != os.getsid(gateway.process.pid), "a terminal's Ctrl-C"
    finally:
        gateway.signal(signal.SIGKILL)
        gateway.process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while alive(redis_pid):
        assert time.monotonic() < deadline, "the embedded redis-server outlived its gateway"
        time.sleep(0.02)


async def test_an_embedded_redis_that_dies_is_started_again_with_its_records(
    upstream, tmp_path: Path
) -> None:
    """The kernel's OOM killer (here a SIGKILL) ends the embedded redis-server: the gateway
    starts it again on its append-only file, instead of answering 503 until it is restarted
    (its health check said it was fine)."""
    counting, origin = upstream
    config = {
        "redis": {"url": "embedded"},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path).start()

    async def post(session: aiohttp.ClientSession, key: str) -> tuple[int, bool]:
        headers = {"Idempotency-Key": key}
        async with session.post(f"{gateway.url}/pay", data=b"x", headers=headers) as r:
            return r.status, "Idempotent-Replayed" in r.headers

    try:
        async with aiohttp.ClientSession() as session:
            assert await post(session, "before") == (201, False)
            assert gateway.process is not None
            (redis_pid,) = children(gateway.process.pid, "redis-server")
            os.kill(redis_pid, signal.SIGKILL)
            deadline = time.monotonic() + 15
            while (status := await post(session, "after"))[0] != 201:
                assert status[0] == 503
                assert time.monotonic() < deadline, "the embedded Redis was not started again"
                await asyncio.sleep(0.1)
            assert await post(session, "before") == (201, True)  # from the append-only file
            assert await post(session, "after") == (201, True)
        assert children(gateway.process.pid, "redis-server") != [redis_pid]
        assert "embedded redis-server exited" in gateway.log()
    finally:
        gateway.stop()
    assert counting.count("/pay", "before") == 1
    assert counting.count("/pay", "after") == 1
