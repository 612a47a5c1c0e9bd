"""The Redis a run uses, and the faults it can take: one server with an append-only file
(`single`), a Sentinel-watched master with replicas, or a Cluster (see `failover.py`)."""

from __future__ import annotations

import signal
from typing import Any, Protocol

import redis

from testkit.redis_server import RedisServer

# Every acknowledged write reaches the disk before the reply: a restart loses none of them.
DURABLE = ["--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"]


class Topology(Protocol):
    name: str

    def start(self) -> None: ...
    def proxy_target(self) -> int | None:
        """The port a fault proxy may stand in front of: one address that redirects no
        client elsewhere (not Sentinel, not Cluster)."""

    def gateway_redis(self, port: int | None = None) -> dict[str, Any]: ...
    def kill(self) -> str: ...
    def recover(self) -> None: ...
    def pause(self, sig: signal.Signals) -> str: ...
    def primary_clients(self) -> list[redis.Redis]: ...
    def close(self) -> None: ...


class Single:
    """One redis-server with AOF (`appendfsync always`)."""

    name = "single"

    def __init__(self) -> None:
        self.server = RedisServer(extra=DURABLE)

    def proxy_target(self) -> int | None:
        return self.server.port

    def start(self) -> None:
        self.server.start()

    def gateway_redis(self, port: int | None = None) -> dict[str, Any]:
        """The gateway's `redis` section, reaching it at `port` (a proxy) if given."""
        return {"url": f"redis://127.0.0.1:{port or self.server.port}/0"}

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.server.port, socket_timeout=2, socket_connect_timeout=1)

    def kill(self) -> str:
        """SIGKILL the server (the master): what was hit."""
        self.server.stop(kill=True)
        return f"redis :{self.server.port}"

    def recover(self) -> None:
        """Start again what `kill` hit, on the same port and data (its AOF)."""
        self.server.start(timeout=30)

    def pause(self, sig: signal.Signals) -> str:
        assert self.server.process is not None
        self.server.process.send_signal(sig)
        return f"redis :{self.server.port}"

    def primary_clients(self) -> list[redis.Redis]:
        """A client for each server taking writes now (for `maxmemory`)."""
        return [self.client()]

    def close(self) -> None:
        if self.server.process is not None:
            self.server.process.send_signal(signal.SIGCONT)
        self.server.close()
