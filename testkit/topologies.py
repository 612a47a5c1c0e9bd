"""Real Redis topologies from the redis-server binary: a Cluster and a Sentinel-watched pair.

Servers start in parallel; every wait polls a condition against a deadline.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

from gateway.core.keys import route_of_name
from testkit.polling import wait_until
from testkit.redis_server import RedisServer

SLOTS = 16384
SERVICE = "idem-master"


def start_all(servers: Iterable[RedisServer], timeout: float = 10.0) -> None:
    """Launch every server, then wait for each: the start-up times overlap."""
    started = list(servers)
    for server in started:
        server.launch()
    for server in started:
        server.wait_ready(timeout)


def client(server: RedisServer) -> redis.Redis:
    return redis.Redis(port=server.port, socket_timeout=2, socket_connect_timeout=1)


class ClusterServers:
    """`masters` cluster-enabled redis-servers joined with CLUSTER MEET, slots split evenly."""

    def __init__(
        self,
        masters: int = 3,
        replicated: bool = False,
        node_timeout_ms: int = 5000,
        extra: list[str] | None = None,
    ) -> None:
        extra = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(node_timeout_ms),
            *(extra or []),
        ]
        self.servers = [RedisServer(extra=extra, cluster_bus=True) for _ in range(masters)]
        # With `replicated`, one replica per master (not in `servers`, which are the masters).
        count = masters if replicated else 0
        self.replicas = [RedisServer(extra=extra, cluster_bus=True) for _ in range(count)]

    @property
    def nodes(self) -> list[str]:
        return [f"127.0.0.1:{server.port}" for server in self.servers]

    def start(self, timeout: float = 20.0) -> None:
        start_all([*self.servers, *self.replicas])
        clients = [client(server) for server in self.servers]
        try:
            first = clients[0]
            for server in [*self.servers[1:], *self.replicas]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)
            share = SLOTS // len(self.servers)
            for i, each in enumerate(clients):
                end = SLOTS if i == len(clients) - 1 else (i + 1) * share
                each.execute_command("CLUSTER", "ADDSLOTS", *range(i * share, end))

            def ready() -> bool:
                for each in clients:
                    info = each.execute_command("CLUSTER", "INFO").decode()
                    if "cluster_state:ok" not in info or (
                        f"cluster_known_nodes:{len(self.servers) + len(self.replicas)}" not in info
                    ):
                        return False
                return True

            wait_until(ready, timeout, "cluster state ok on every node")
            if self.replicas:
                self._replicate(timeout)
        finally:
            for each in clients:
                each.close()

    def _replicate(self, timeout: float) -> None:
        """Make each replica follow its master, then wait until every master has it online."""
        total = len(self.servers) + len(self.replicas)

        def knows_all(server: RedisServer) -> bool:
            with client(server) as each:
                info = each.execute_command("CLUSTER", "INFO").decode()
            return f"cluster_known_nodes:{total}" in info

        for master, replica in zip(self.servers, self.replicas, strict=True):
            wait_until(lambda r=replica: knows_all(r), timeout, "the replica knows the cluster")
            with client(replica) as each:
                each.execute_command("CLUSTER", "REPLICATE", node_id(master))
        for master in self.servers:
            wait_until(
                lambda m=master: SentinelServers.replicas_online(m) == 1, timeout, "replica online"
            )
        # A failover needs the votes of the masters: each must know every replica as one.
        replicas = {node_id(replica) for replica in self.replicas}

        def every_master_knows() -> bool:
            for master in self.servers:
                with client(master) as each:
                    nodes = each.execute_command("CLUSTER", "NODES").decode().splitlines()
                known = {line.split()[0] for line in nodes if " slave " in f" {line} "}
                if known != replicas:
                    return False
            return True

        wait_until(every_master_knows, timeout, "every master knows the replicas")

    def keys_per_node(self, prefix: str = "idem") -> list[int]:
        """The records each master holds (a route's dictionary and the gateways' marks left
        out)."""
        counts = []
        for server in self.servers:
            with client(server) as each:
                names = (name.decode() for name in each.scan_iter(count=1000))
                counts.append(sum(route_of_name(prefix, name) is not None for name in names))
        return counts

    def close(self) -> None:
        for server in [*self.replicas, *self.servers]:
            server.close()


class SentinelServers:
    """A master, one replica of it, and one Sentinel (quorum 1) that fails over fast."""

    def __init__(self) -> None:
        self.master = RedisServer()
        self.replica = RedisServer(extra=["--replicaof", "127.0.0.1", str(self.master.port)])
        self.sentinel = RedisServer(
            extra=["--sentinel"],
            config="\n".join(
                [
                    f"sentinel monitor {SERVICE} 127.0.0.1 {self.master.port} 1",
                    f"sentinel down-after-milliseconds {SERVICE} 1000",
                    f"sentinel failover-timeout {SERVICE} 3000",
                    "",
                ]
            ),
        )

    @property
    def sentinel_node(self) -> str:
        return f"127.0.0.1:{self.sentinel.port}"

    def start(self, timeout: float = 20.0) -> None:
        start_all([self.master, self.replica])
        wait_until(lambda: self.replicas_online(self.master) == 1, timeout, "replica in sync")
        self.sentinel.start()

        def knows_replica() -> bool:
            with client(self.sentinel) as sentinel:
                found = sentinel.execute_command("SENTINEL", "REPLICAS", SERVICE)
            return len(found) == 1

        wait_until(knows_replica, timeout, "sentinel sees the replica")

    @staticmethod
    def replicas_online(server: RedisServer) -> int:
        with client(server) as each:
            info = each.info("replication")
        return sum(
            1
            for name, value in info.items()
            if name.startswith("slave") and isinstance(value, dict) and value["state"] == "online"
        )

    def fail_over(self, timeout: float = 15.0) -> None:
        """`SENTINEL FAILOVER`, once Sentinel has a replica it will promote (until then it
        answers NOGOODSLAVE); the old master stays up and is made a replica of the new."""

        def accepted() -> bool:
            with client(self.sentinel) as sentinel:
                try:
                    sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
                except redis.ResponseError as refused:
                    if "NOGOODSLAVE" not in str(refused):
                        raise
                    return False
            return True

        old = self.master_port()
        wait_until(accepted, timeout, "sentinel accepts the failover")
        wait_until(lambda: self.master_port() != old, timeout, "sentinel failover")

        def demoted() -> bool:
            with client(self.master) as master:
                return bool(master.info("replication")["role"] == "slave")

        wait_until(demoted, timeout, "the old master is a replica")

    def master_port(self) -> int:
        with client(self.sentinel) as sentinel:
            _, port = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(port)

    def close(self) -> None:
        for server in (self.sentinel, self.replica, self.master):
            server.close()


def node_id(server: RedisServer) -> str:
    with client(server) as each:
        return str(each.execute_command("CLUSTER", "MYID").decode())


def slot_owner(servers: list[RedisServer], slot: int) -> RedisServer:
    """The master that the first server's slot map names for `slot`."""
    with client(servers[0]) as each:
        for start, end, (_, port, *_), *_ in each.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return next(server for server in servers if server.port == port)
    raise LookupError(f"slot {slot} is not served")


def hold_migrating(
    servers: list[RedisServer], slot: int, source: RedisServer, target: RedisServer
) -> None:
    """Mark `slot` IMPORTING on `target` and MIGRATING on `source`, as a resharding does."""
    with client(target) as each:
        each.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
    with client(source) as each:
        each.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))


def finish_migration(
    servers: list[RedisServer], slot: int, source: RedisServer, target: RedisServer
) -> int:
    """Move the slot's keys from `source` to `target` with MIGRATE, then give every node the
    slot's new owner; how many keys moved."""
    moved = 0
    with client(source) as each:
        while keys := each.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            each.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
    owner = node_id(target)
    for server in (target, source, *servers):
        with client(server) as each:
            each.execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner)
    return moved


def connections_received(servers: list[RedisServer]) -> int:
    total = 0
    for server in servers:
        with client(server) as each:
            total += int(each.info("stats")["total_connections_received"])
    return total
