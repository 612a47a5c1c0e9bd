"""A real redis-server for tests and load runs: on a loopback port this process holds (or a
unix socket), with extra options or a config file, that a test can stop, kill and start
again.

redis-server cannot be handed a socket: it binds its port itself, beside this process's
hold on it (`testkit.ports.Port`, a bound socket that never listens; redis-server sets
SO_REUSEADDR, as the hold does). No other bind(0) and no connection's own end is given a
held port, so the server's bind finds it free, at its first start and at each start
again, and nothing else answers there while it is down."""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from pathlib import Path

from gateway.store.embedded import find_redis_server, stop, wait_ready
from testkit.ports import Port, port_pair

log = logging.getLogger(__name__)

# A server binary for the tests to run on instead of the gateway's own choice: another Redis
# release's, or a Valkey's (the record tests run on each, docs/verification.md).
SERVER_VARIABLE = "IDEM_TEST_REDIS_SERVER"


def server_binary() -> tuple[str, str]:
    """The redis-server the tests start, and where it came from."""
    chosen = os.environ.get(SERVER_VARIABLE)
    if chosen:
        return chosen, SERVER_VARIABLE
    return find_redis_server()


class RedisServer:
    """A redis-server child process on a loopback port or a unix socket in its own temp dir.

    It can be stopped, killed and started again on the same address with the same data dir.
    `cluster_bus`: a Cluster node's, whose bus port (its port + 10000) is held as well.
    """

    def __init__(
        self,
        unix_socket: bool = False,
        extra: list[str] | None = None,
        config: str | None = None,
        cluster_bus: bool = False,
    ) -> None:
        self.binary, self.source = server_binary()
        self._dir = tempfile.TemporaryDirectory(prefix="idem-redis-")
        self.dir = Path(self._dir.name)
        self.unix_socket = str(self.dir / "redis.sock") if unix_socket else None
        self.held: list[Port] = []  # its port (and a Cluster node's bus port), until `close`
        if not unix_socket:
            self.held = list(port_pair(10_000)) if cluster_bus else [Port()]
        self.port = self.held[0].number if self.held else 0
        self.extra = extra or []
        # A config file (Sentinel needs one it can rewrite); command-line options override it.
        self.config_file = self.dir / "redis.conf" if config is not None else None
        if self.config_file is not None:
            self.config_file.write_text(config or "")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.unix_socket:
            return f"unix://{self.unix_socket}"
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        self.launch()
        self.wait_ready(timeout)
        log.info(
            "redis-server %s (from the %s) listening at %s", self.binary, self.source, self.url
        )

    def launch(self) -> None:
        """Start the process without waiting for it (start several, then `wait_ready` each)."""
        config = [str(self.config_file)] if self.config_file is not None else []
        args = [
            self.binary, *config, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        if self.unix_socket:
            args += ["--unixsocket", self.unix_socket, "--unixsocketperm", "700"]
        args += self.extra
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        wait_ready(self.process, self.url, self.dir / "redis.log", timeout)

    def stop(self, kill: bool = False) -> None:
        """Terminate (or SIGKILL) the process and wait for it."""
        if self.process is not None:
            stop(self.process, kill)
            self.process = None

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()
        for port in self.held:
            port.close()
