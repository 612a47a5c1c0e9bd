"""Child processes of a load run: start, wait for the port, read CPU time, stop."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Coroutine
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from gateway.cli import new_loop
from testkit.ports import kept_port, wait_for_port
from testkit.redis_server import RedisServer

_TICKS = os.sysconf("SC_CLK_TCK")


def run_server(loop_kind: str, main: Coroutine[Any, Any, None]) -> None:
    """Run a server's coroutine on the chosen event loop until it is interrupted."""
    loop = new_loop(loop_kind)
    try:
        loop.run_until_complete(main)
    except KeyboardInterrupt:
        pass
    finally:
        loop.close()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from its own accounting in /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15)


class Child:
    """A Python module run as a child process listening on `port`; its output in `log`."""

    def __init__(
        self,
        name: str,
        module: str,
        port: int,
        args: list[str],
        workdir: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """`cwd`: where it runs. `python -m` puts that folder first on the path, before
        PYTHONPATH: a child meant to run another tree's code must not run in this one."""
        self.name = name
        self.port = port
        self.admin_url: str | None = None  # a gateway's admin listener, when it has one
        self.scheme = "http"  # "https" for a gateway with listen.tls
        self.log = workdir / f"{name}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=None if env is None else {**os.environ, **env}, cwd=cwd,
            )  # fmt: skip
        try:
            wait_for_port(port, self.process)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 15 s; waits until it has exited."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def spare_last_core() -> list[int] | None:
    """Move this process, and every child it starts from now on, off the last core, and
    return that core for the process to measure (`pin`); None on a single core. Without a
    core of its own, the measured process's CPU per request moved by 10-20% between runs."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    os.sched_setaffinity(0, cores[:-1])
    return cores[-1:]


def pin(pid: int, core: list[int] | None) -> None:
    """Run `pid` on `core` alone (the one `spare_last_core` kept), if there is one."""
    if core is not None:
        os.sched_setaffinity(pid, core)


def start_redis(stack: ExitStack) -> RedisServer:
    """A redis-server of the run's own on a loopback port it holds, stopped when `stack`
    closes."""
    server = RedisServer()
    server.start()
    stack.callback(server.close)
    return server


def start_upstream(stack: ExitStack, workdir: Path) -> Child:
    """The counting upstream (`loadtest.upstream`) of the run, stopped when `stack` closes."""
    port = kept_port()
    upstream = Child("upstream", "loadtest.upstream", port, ["--port", str(port)], workdir)
    stack.callback(upstream.stop)
    return upstream
