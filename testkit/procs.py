"""Running the gateway as a real subprocess, for tests that kill, restart or signal it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from testkit.polling import wait_until
from testkit.ports import Port, wait_for_port

# How long a gateway process may take from its launch until each of its workers serves. A
# start is about a second of CPU (Python's imports, then the application's start), and a
# `--workers N` gateway starts its other workers only once the first serves: measured beside
# two busy loops, two workers served 6 to 10 s after the launch, and among the suite's own
# workers as well, up to twice that. A gateway that hangs at its start still fails here.
STARTS_WITHIN: Final = 45.0
# What a gateway (or each of its workers) logs once its application serves.
LISTENING: Final = "idem-gateway listening on"


class GatewayProcess:
    """`python -m gateway --config FILE` in a child process, on a port of its own.

    `config` is the YAML tree. Where it names no `listen.port` (nor an `admin.port`, for an
    `admin` it has), this process holds one (`testkit.ports.Port`), fills it in, and hands
    the child a socket bound to it at each start (`--listen-fd`, `--admin-fd`), so that a
    gateway started again serves on the same port, which nothing took meanwhile; `close`
    lets them go. A port the config names, the gateway binds itself (a test of that bind).
    Output goes to a log file in `workdir`, which `log()` reads back.
    """

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        args: list[str] | None = None,
        entry: Sequence[str] = ("-m", "gateway"),
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """`env`: added to this process's environment; `cwd`: where it runs (`python -m`
        puts that folder first on the path, before PYTHONPATH: a gateway of another tree
        must not run in this one)."""
        config = {**config, "listen": {"host": "127.0.0.1", **config.get("listen", {})}}
        self._held: dict[str, Port] = {}  # the ports handed to the child: listen, admin
        for part in ("listen", "admin"):
            if part in config and config[part].get("port") is None:
                self._held[part] = Port()
                config[part] = {**config[part], "port": self._held[part].number}
        self.port: int = config["listen"]["port"]
        self._admin_port: int | None = config["admin"]["port"] if "admin" in config else None
        self._says_when_it_serves = config.get("log_level", "info") in ("debug", "info")
        self.workdir = workdir
        self.config_path = workdir / f"gateway-{self.port}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / f"gateway-{self.port}.log"
        # One process unless a test asks for --workers (the default is one per core).
        self.args = args if args and "--workers" in args else ["--workers", "1", *(args or [])]
        self.entry = list(entry)  # what python runs: the gateway, or a wrapper of it
        self.env = env or {}
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_port(self) -> int:
        """Its admin listener's port (its config has an `admin` section)."""
        assert self._admin_port is not None, "this gateway has no admin listener"
        return self._admin_port

    def start(self, timeout: float = STARTS_WITHIN) -> GatewayProcess:
        """Launch it and return once it serves. Its socket is bound, and takes connections
        into its backlog, before its application starts: where it logs at `info`, it serves
        once it says it listens (a test that reads its log then finds that line before the
        lines it looks for)."""
        logged = len(self.log())  # a gateway started again appends to its log
        self._launch()
        assert self.process is not None
        started = time.monotonic()
        wait_for_port(self.port, self.process, timeout)
        if self._says_when_it_serves:
            left = timeout - (time.monotonic() - started)
            wait_until(lambda: self._listening(logged), left, "the gateway says it listens")
        return self

    def _listening(self, logged: int) -> bool:
        """Whether its log says it listens, past the first `logged` characters; a gateway
        that exited is an error at once."""
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the gateway exited with {self.process.returncode}")
        return LISTENING in self.log()[logged:]

    def exits(self, timeout: float = 30.0) -> int:
        """Run it where it should refuse to start: its exit code, once it has stopped."""
        self._launch()
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def _launch(self) -> None:
        handed: dict[str, socket.socket] = {}
        try:
            for part, port in self._held.items():
                handed[part] = port.socket()
            inherited = [f"--{part}-fd={sock.fileno()}" for part, sock in handed.items()]
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, *self.entry, "--config", str(self.config_path),
                     *inherited, *self.args],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env}, cwd=self.cwd,
                    pass_fds=[sock.fileno() for sock in handed.values()],
                )  # fmt: skip
        finally:
            for sock in handed.values():  # the child's now
                sock.close()

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no cleanup runs, as in a crash."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def close(self) -> None:
        """Stop it if it runs, and let its ports go."""
        self.stop()
        for port in self._held.values():
            port.close()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; the exit code (its ports stay held: it may start again)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.terminate()
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def worker_pids(self) -> list[int]:
        """The pids of a `--workers N` gateway's workers: its supervisor's children."""
        assert self.process is not None
        pid = self.process.pid
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


GRACE = 10.0  # seconds a stopped run's processes have to end before they are killed


def stop_group(run: subprocess.Popen[Any]) -> int:
    """SIGTERM to the process group of `run` (started with `start_new_session`), SIGKILL to
    what is left of it after GRACE: all it started stopped; its exit status."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(run.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while time.monotonic() < deadline and _group_left(run):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(run.pid, signal.SIGKILL)
    return run.wait()


def _group_left(run: subprocess.Popen[Any]) -> bool:
    run.poll()  # the leader reaped once it ends: a zombie still counts in its group
    try:
        os.killpg(run.pid, 0)
    except ProcessLookupError:
        return False
    return True
