"""The embedded redis-server lives and dies with its gateway."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis

from testkit.polling import until
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


def thread(pid: int, name: str) -> int:
    """The id of the thread named `name` in process `pid`."""
    (tid,) = [
        int(task.name)
        for task in Path(f"/proc/{pid}/task").iterdir()
        if (task / "comm").read_text().strip() == name
    ]
    return tid


PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH = 0x4206, 0x4207, 17
WALL = 0x40000000  # waitpid's __WALL: a thread of another process, traced by this one


@contextlib.contextmanager
def frozen(pid: int, tid: int) -> Iterator[Callable[[], None]]:
    """Thread `tid` of process `pid` stopped (ptrace), the rest of the process running: a
    disk where every fsync that thread is given hangs. Yields what SIGKILLs the process (and
    reaps the traced thread, without which its parent could not reap it); the thread is let
    go on the way out when the process was not killed."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
        pytest.skip(f"ptrace refused: {os.strerror(ctypes.get_errno())}")
    killed = False

    def kill() -> None:
        nonlocal killed
        os.kill(pid, signal.SIGKILL)
        killed = True
        while True:
            _, status = os.waitpid(tid, WALL)
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                return

    try:
        assert libc.ptrace(PTRACE_INTERRUPT, tid, None, None) == 0
        _, status = os.waitpid(tid, WALL)
        assert os.WIFSTOPPED(status)
        yield kill
    finally:
        if not killed:
            libc.ptrace(PTRACE_DETACH, tid, None, None)


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
    await until(lambda: not alive(redis_pid), 10, "the embedded redis-server ending with it")


def _embedded_config(origin: str) -> dict[str, Any]:
    return {
        "redis": {"url": "embedded"},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }


async def _post(
    gateway: GatewayProcess, session: aiohttp.ClientSession, key: str
) -> tuple[int, bool]:
    """POST /pay with `key`: the status, and whether the answer was a replay."""
    headers = {"Idempotency-Key": key}
    async with session.post(f"{gateway.url}/pay", data=b"x", headers=headers) as r:
        return r.status, "Idempotent-Replayed" in r.headers


async def _until_started_again(gateway: GatewayProcess, session: aiohttp.ClientSession) -> None:
    """Once its embedded Redis was killed: until the gateway started it again, the key "after"
    answered 201 (503 until then)."""

    async def answered() -> bool:
        status, _ = await _post(gateway, session, "after")
        assert status in (201, 503), status
        return status == 201

    await until(answered, 15, "the embedded Redis started again", every=0.1)


async def test_an_embedded_redis_that_dies_is_started_again_with_its_records(
    upstream, tmp_path: Path
) -> None:
    """The kernel's OOM killer (here a SIGKILL) ends the embedded redis-server: the gateway
    starts it again on its append-only file, instead of answering 503 until it is restarted
    (its health check said it was fine)."""
    counting, origin = upstream
    gateway = GatewayProcess(_embedded_config(origin), tmp_path).start()
    post = partial(_post, gateway)

    try:
        async with aiohttp.ClientSession() as session:
            assert await post(session, "before") == (201, False)
            assert gateway.process is not None
            (redis_pid,) = children(gateway.process.pid, "redis-server")
            os.kill(redis_pid, signal.SIGKILL)
            await _until_started_again(gateway, session)
            assert await post(session, "before") == (201, True)  # from the append-only file
            assert await post(session, "after") == (201, True)
        assert children(gateway.process.pid, "redis-server") != [redis_pid]
        assert "embedded redis-server exited" in gateway.log()
    finally:
        gateway.stop()
    assert counting.count("/pay", "before") == 1
    assert counting.count("/pay", "after") == 1


async def test_a_kill_of_the_embedded_redis_loses_no_acknowledged_record_on_a_slow_disk(
    upstream, tmp_path: Path, state_dir: Path
) -> None:
    """An OOM kill of the embedded redis-server while its disk is slow to fsync loses nothing
    Redis acknowledged. With `appendfsync everysec` Redis holds every write back in its own
    memory while its background fsync is pending (up to 2 s), acknowledging all the same: the
    key's claim and record died with it, and the retry ran the call a second time."""
    counting, origin = upstream
    gateway = GatewayProcess(_embedded_config(origin), tmp_path).start()
    post = partial(_post, gateway)

    try:
        assert gateway.process is not None
        (redis_pid,) = children(gateway.process.pid, "redis-server")
        client = redis.Redis(unix_socket_path=str(state_dir / "redis" / "redis.sock"))
        with client, frozen(redis_pid, thread(redis_pid, "bio_aof_fsync")) as kill:
            if client.config_get("appendfsync")["appendfsync"] == "everysec":
                # Such a Redis hands the fsync of a write to the frozen thread within a
                # second: from then on it holds back what it writes (the stalled disk).
                client.set("written", "1")
                await until(
                    lambda: client.info("persistence")["aof_pending_bio_fsync"],
                    10,
                    "an fsync handed to the thread",
                    every=0.01,
                )
            async with aiohttp.ClientSession() as session:
                assert await post(session, "before") == (201, False)
            kill()  # the OOM killer
        async with aiohttp.ClientSession() as session:
            await _until_started_again(gateway, session)
            replayed = await post(session, "before")
    finally:
        gateway.stop()
    assert counting.count("/pay", "before") == 1, "the call ran again"
    assert replayed == (201, True)
