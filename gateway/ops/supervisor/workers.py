"""`--workers N`: a parent process supervising N gateway processes on one port.

The children serve the listening socket the parent bound, so the kernel spreads new
connections over them. It starts the embedded redis-server once (children share it),
forwards SIGTERM/SIGINT (children drain, then exit) and SIGHUP, and starts a new child when
one dies, with what the others serve with (`serving`). A child that dies at its start is
started again after a pause that grows (`core.backoff.WORKER_START`): the others serve on
meanwhile, however often it fails. Each child has a slot (0 to N-1) that the child
replacing it takes over: its `worker` label on the one admin address (`admin_hub`), which
the parent serves.
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
from dataclasses import dataclass
from types import FrameType
from typing import Final

from aiohttp import web

from gateway.core.backoff import WORKER_START, Pauses
from gateway.lifeline import die_with_parent
from gateway.ops.supervisor.admin_hub import Hub
from gateway.ops.supervisor.serving import Serving

log = logging.getLogger("gateway.ops.supervisor.workers")

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


@dataclass
class _Child:
    process: subprocess.Popen[bytes]
    slot: int
    ready: int | None  # the read end of the pipe it says "serving" on, until it has
    serves: bool = False


class Supervisor:
    """Starts `count` children running `command`, and keeps them running until told to stop."""

    def __init__(
        self,
        command: list[str],
        count: int,
        keep_fds: tuple[int, ...] = (),
        hub: Hub | None = None,
        serving: Serving | None = None,
    ) -> None:
        self.command = command
        self.count = count
        self.keep_fds = keep_fds  # passed to each child (the listening socket)
        self.hub = hub  # the one admin address, which asks each child on its own socket
        self.serving = serving  # the config and certificate each child starts with
        self.children: dict[int, _Child] = {}
        self.stopping = False
        self.failures: dict[int, int] = {}  # slot -> failed starts in a row
        self.pauses: dict[int, Pauses] = {}  # slot -> the pauses between them
        self.due: dict[int, float] = {}  # slot -> when its next start is tried

    def _spawn(self, slot: int, said: bool = True) -> _Child:
        """Start the worker of `slot`; it says on a pipe once it serves (`_heard`). `said`:
        its start is logged now (the first worker's once it serves)."""
        read_end, write_end = os.pipe()
        command = [*self.command, "--ready-fd", str(write_end)]
        if self.serving is not None:
            command += ["--serving", str(self.serving.current)]
        if self.hub is not None:
            command += ["--admin-socket", self.hub.channel(slot)]
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                preexec_fn=_child_setup,
                pass_fds=(*self.keep_fds, write_end),
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the worker holds it: end of file once it exits
        child = self.children[process.pid] = _Child(process, slot, read_end)
        if self.hub is not None:
            self.hub.started(slot, process.pid)
        if self.stopping:  # the stop came while it started, too late to be forwarded to it
            process.send_signal(signal.SIGTERM)
        elif said:
            log.info("worker pid %d started", process.pid)
        return child

    def _heard(self, child: _Child) -> None:
        """Its pipe is readable: it serves, or it exited before it did."""
        if child.ready is None:
            return
        child.serves = os.read(child.ready, 1) == b"1"
        os.close(child.ready)
        child.ready = None
        if child.serves:
            self.failures.pop(child.slot, None)
            self.pauses.pop(child.slot, None)

    def _first_serves(self) -> int | None:
        """Start one worker alone and wait until it serves: None. A config it refuses at
        start (a blob store, an evicting Redis, an admin port) it says in one line and exits
        2 or 3: that code, before N workers each say it N times over and are restarted."""
        child = self._spawn(0, said=False)
        while child.ready is not None:
            if select.select([child.ready], [], [], REAP_TICK)[0]:
                self._heard(child)  # signal handlers run meanwhile
        if child.serves:
            log.info("worker pid %d started", child.process.pid)
            return None
        code = child.process.wait()
        del self.children[child.process.pid]
        if self.hub is not None:
            self.hub.exited(0)
        if self.stopping and code in (0, -signal.SIGTERM):  # stopped as it started
            return 0
        return code if code > 0 else 1

    def _forward(self, sig: int) -> None:
        for child in self.children.values():
            if child.process.returncode is None:
                child.process.send_signal(sig)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGHUP:
            log.info("SIGHUP: passed on to %d workers", len(self.children))
            self._forward(sig)
            if self.serving is not None:
                self.serving.reload()
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
        while self.children or (self.due and not self.stopping):
            pid = self._reap()
            if pid is None:
                continue
            child = self.children.pop(pid)
            returncode = child.process.returncode
            if self.hub is not None:
                self.hub.exited(child.slot)
            if self.stopping:
                code = code or (returncode if returncode > 0 else 0)
                continue
            log.error("worker pid %d exited with %d", pid, returncode)
            if child.serves:
                self._spawn(child.slot)
            else:
                self._failed_start(child.slot)
        return code

    def _failed_start(self, slot: int) -> None:
        """A worker that died before it served: tried again later, the others serving on."""
        failures = self.failures[slot] = self.failures.get(slot, 0) + 1
        pause = self.pauses.setdefault(slot, WORKER_START.pauses()).next()
        self.due[slot] = time.monotonic() + pause
        if self.hub is not None:
            self.hub.failed_start()
        serving = sum(1 for child in self.children.values() if child.serves)
        log.error(
            "worker %d failed at its start (%d time%s in a row); starting it again in %.1f s, "
            "%d other worker%s serving",
            slot,
            failures,
            "" if failures == 1 else "s",
            pause,
            serving,
            "" if serving == 1 else "s",
        )

    def _reap(self) -> int | None:
        """Wait until one of our own workers has exited (its pid) or a slot is due for
        another start (None, once started), hearing meanwhile which workers serve. Only the
        workers are polled, so another child of this process (the embedded redis-server) is
        never reaped here, which would hide its exit from its owner."""
        while True:
            for pid, child in self.children.items():
                if child.process.poll() is not None:
                    self._heard(child)  # it may have said it served just before it exited
                    return pid
            if self.stopping:
                self.due.clear()
            if not self.children and not self.due:
                return None
            now = time.monotonic()
            for slot, when in list(self.due.items()):
                if when <= now:
                    del self.due[slot]
                    self._spawn(slot)
                    return None
            if self.serving is not None:
                self.serving.look()
            starting = {c.ready: c for c in self.children.values() if c.ready is not None}
            if not starting:
                time.sleep(REAP_TICK)  # signal handlers run meanwhile
                continue
            for fd in select.select(list(starting), [], [], REAP_TICK)[0]:
                self._heard(starting[fd])


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
