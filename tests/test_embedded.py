"""The embedded redis-server lives and dies with its gateway."""

from __future__ import annotations

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
