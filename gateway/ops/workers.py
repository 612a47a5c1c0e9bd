"""`--workers N`: a parent process supervising N gateway processes on one port.

The children serve the listening socket the parent bound, so the kernel spreads new
connections over them. It starts the embedded redis-server once (children share it),
forwards SIGTERM/SIGINT (children drain, then exit) and SIGHUP, and starts a new child when
one dies, unless children keep dying right after they start. Each child has a slot (0 to
N-1) that the child replacing it takes over: its `worker` label on the one admin address
(`ops.hub`), which the parent serves.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Final

from aiohttp import web

from gateway.lifeline import die_with_parent
from gateway.ops.hub import Hub

log = logging.getLogger("gateway.ops.workers")

# A child that dies sooner than this after its start counts as a failed start.
STARTUP_GRACE: Final = 5.0
MAX_FAILED_STARTS: Final = 3
# How often the supervisor looks for an exited worker.
REAP_TICK: Final = 0.1


def default_workers() -> int:
    """One process per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _child_setup() -> None:
    """In the child, before exec: die with the parent, so none is orphaned, and ignore SIGHUP
    until the gateway installs its own handler (the ignored state survives exec)."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    die_with_parent(signal.SIGKILL)


def count_requests(app: web.Application) -> None:
    """Log at exit how many answers this worker started, to show the load is shared."""
    served = [0]

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        served[0] += 1

    async def on_cleanup(app: web.Application) -> None:
        log.info("worker pid %d served %d requests", os.getpid(), served[0])

    app.on_response_prepare.append(on_prepare)
    app.on_cleanup.append(on_cleanup)


class Supervisor:
    """Starts `count` children running `command`, and keeps them running until told to stop."""

    def __init__(
        self,
        command: list[str],
        count: int,
        keep_fds: tuple[int, ...] = (),
        hub: Hub | None = None,
    ) -> None:
        self.command = command
        self.count = count
        self.keep_fds = keep_fds  # passed to each child (the listening socket)
        self.hub = hub  # the one admin address, which asks each child on its own socket
        self.children: dict[int, tuple[subprocess.Popen[bytes], float, int]] = {}
        self.stopping = False
        self.failed_starts = 0

    def _spawn(self, slot: int, ready_fd: int | None = None) -> subprocess.Popen[bytes]:
        command, fds = self.command, self.keep_fds
        if self.hub is not None:
            command = [*command, "--admin-socket", self.hub.channel(slot)]
        if ready_fd is not None:
            command, fds = [*command, "--ready-fd", str(ready_fd)], (*fds, ready_fd)
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, preexec_fn=_child_setup, pass_fds=fds
        )
        self.children[child.pid] = (child, time.monotonic(), slot)
        if self.hub is not None:
            self.hub.started(slot, child.pid)
        if self.stopping:  # the stop came while it started, too late to be forwarded to it
            child.send_signal(signal.SIGTERM)
        elif ready_fd is None:
            log.info("worker pid %d started", child.pid)
        return child

    def _first_serves(self) -> int | None:
        """Start one worker alone and wait until it serves: None. A config it refuses at
        start (a blob store, an evicting Redis, an admin port) it says in one line and exits
        2 or 3: that code, before N workers each say it N times over and are restarted."""
        read_end, write_end = os.pipe()
        try:
            child = self._spawn(0, ready_fd=write_end)
        finally:
            os.close(write_end)  # the worker holds it: end of file once it exits
        try:
            while not select.select([read_end], [], [], REAP_TICK)[0]:
                pass  # signal handlers run meanwhile
            if os.read(read_end, 1):
                log.info("worker pid %d started", child.pid)
                return None
        finally:
            os.close(read_end)
        code = child.wait()
        del self.children[child.pid]
        if self.hub is not None:
            self.hub.exited(0)
        if self.stopping and code in (0, -signal.SIGTERM):  # stopped as it started
            return 0
        return code if code > 0 else 1

    def _forward(self, sig: int) -> None:
        for child, _, _ in self.children.values():
            if child.returncode is None:
                child.send_signal(sig)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGHUP:
            log.info("SIGHUP: passed on to %d workers", len(self.children))
            self._forward(sig)
            if self.hub is not None:
                self.hub.reload()
            return
        if not self.stopping:
            log.info("stopping: %d workers drain their requests", len(self.children))
        self.stopping = True
        if self.hub is not None:
            self.hub.stopping()
        self._forward(signal.SIGTERM)

    def run(self, on_ready: Callable[[], None] | None = None) -> int:
        """Supervise until every child has exited after a stop; the exit code. `on_ready`
        runs once the first worker serves."""
        handler: Callable[[int, FrameType | None], None] = self._on_signal
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, handler)
        refused = self._first_serves()
        if refused is not None:
            return refused
        if on_ready is not None:
            on_ready()
        for slot in range(1, self.count):
            if not self.stopping:  # a stop right after the first one served starts no more
                self._spawn(slot)
        code = 0
        while self.children:
            pid = self._reap()
            child, started, slot = self.children.pop(pid)
            if self.hub is not None:
                self.hub.exited(slot)
            if self.stopping:
                code = code or (child.returncode if child.returncode > 0 else 0)
                continue
            log.error("worker pid %d exited with %d", pid, child.returncode)
            if time.monotonic() - started < STARTUP_GRACE:
                self.failed_starts += 1
            if self.failed_starts >= MAX_FAILED_STARTS:
                log.error("workers keep failing at start; stopping")
                self.stopping = True
                if self.hub is not None:
                    self.hub.stopping()
                self._forward(signal.SIGTERM)
                code = 1
                continue
            self._spawn(slot)
        return code

    def _reap(self) -> int:
        """Wait until one of our own workers has exited; its pid. Only the workers are
        polled, so another child of this process (the embedded redis-server) is never
        reaped here, which would hide its exit from its owner."""
        while True:
            for pid, (child, _, _) in self.children.items():
                if child.poll() is not None:
                    return pid
            time.sleep(REAP_TICK)  # signal handlers run meanwhile


def worker_command(config: str | None, redis_url: str | None, listen_fd: int) -> list[str]:
    """How the parent runs one child: this gateway, as a worker on the parent's socket (and
    Redis). `-P`: the working folder is not searched for modules, so a `gateway/` folder
    there cannot shadow the installed package."""
    command = [sys.executable, "-P", "-m", "gateway", "--worker", "--listen-fd", str(listen_fd)]
    if redis_url:
        command += ["--redis-url", redis_url]
    if config:
        command += ["--config", os.path.abspath(config)]
    return command
