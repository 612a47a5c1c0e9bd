"""Replicated Redis topologies for a run, and their failovers.

- `sentinel`: a master, two replicas and three Sentinels (quorum 2) that fail over after
  1 s of silence. Faults: the master SIGKILLed (a failover; it comes back as a replica), the
  master paused, the master full, and `redis-failover` (SENTINEL FAILOVER).
- `cluster`: three masters with a replica each (node timeout 3 s: longer
  than a paused master's 1.5 s). Faults: a master
  SIGKILLed (its replica takes over; it comes back as a replica), a master paused, every
  master full, `redis-failover` (CLUSTER FAILOVER on a replica, its master demoted) and
  `redis-migrate` (slots moved to another master under load, keys and all).

Replication is asynchronous: a claim the master acknowledged may be lost with it. The
gateway's `redis.claim_replicas` makes it wait for that many replicas (WAIT) first.
"""

from __future__ import annotations

import random
import signal
from typing import Any

import redis

from loadtest.verify.topology import DURABLE, Single, Topology
from testkit.redis_server import RedisServer
from testkit.topologies import (
    ClusterServers,
    client,
    finish_migration,
    hold_migrating,
    node_id,
    start_all,
    wait_until,
)

SERVICE = "idem-verify"
MIGRATED_SLOTS = 16  # moved at once by one `redis-migrate`


class Sentinel:
    name = "sentinel"
    kinds = ("redis-failover",)

    def __init__(self, claim_replicas: int) -> None:
        self.claim_replicas = claim_replicas
        self.servers = [RedisServer(extra=DURABLE)]
        master = self.servers[0].port
        self.servers += [
            RedisServer(extra=[*DURABLE, "--replicaof", "127.0.0.1", str(master)]) for _ in range(2)
        ]
        conf = "\n".join(
            [
                f"sentinel monitor {SERVICE} 127.0.0.1 {master} 2",
                f"sentinel down-after-milliseconds {SERVICE} 1000",
                f"sentinel failover-timeout {SERVICE} 3000",
                "",
            ]
        )
        self.sentinels = [RedisServer(extra=["--sentinel"], config=conf) for _ in range(3)]
        self.down: RedisServer | None = None

    def start(self) -> None:
        start_all(self.servers)
        wait_until(lambda: self.replicas_online(self.servers[0]) == 2, 20, "replicas in sync")
        start_all(self.sentinels)

        def all_see_replicas() -> bool:
            for sentinel in self.sentinels:
                with client(sentinel) as each:
                    if len(each.execute_command("SENTINEL", "REPLICAS", SERVICE)) != 2:
                        return False
            return True

        wait_until(all_see_replicas, 20, "every sentinel sees both replicas")

    @staticmethod
    def replicas_online(master: RedisServer) -> int:
        with client(master) as each:
            info = each.info("replication")
        return sum(
            1
            for name, value in info.items()
            if name.startswith("slave") and isinstance(value, dict) and value["state"] == "online"
        )

    def master(self) -> RedisServer:
        with client(self.sentinels[0]) as sentinel:
            _, port = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return next(s for s in self.servers if s.port == int(port))

    def proxy_target(self) -> int | None:
        return None  # Sentinel hands out the servers' own addresses

    def gateway_redis(self, port: int | None = None) -> dict[str, Any]:
        nodes = [f"127.0.0.1:{s.port}" for s in self.sentinels]
        return {"sentinel": {"nodes": nodes, "service": SERVICE}, **replicas(self)}

    def kill(self) -> str:
        self.down = self.master()
        self.down.stop(kill=True)
        return f"master :{self.down.port} (failover)"

    def recover(self) -> None:
        """Wait for the new master, then start the old one: Sentinel makes it a replica."""
        assert self.down is not None
        down = self.down
        wait_until(lambda: self.master() is not down, 30, "sentinel promoted a replica")
        down.start(timeout=30)
        # Until Sentinel makes it a replica it is a master of its own, with its old data
        # (and maybe a replica still following it): the fault lasts until it is demoted.
        wait_until(self.settled, 30, "the old master follows the new one")
        self.down = None

    def pause(self, sig: signal.Signals) -> str:
        if sig == signal.SIGSTOP:
            self.down = self.master()
        assert self.down is not None and self.down.process is not None
        self.down.process.send_signal(sig)
        target = f"master :{self.down.port}"
        if sig == signal.SIGCONT:
            # Paused past down-after-milliseconds, it may have been failed over: until
            # the Sentinels agree and it follows the new master, it takes writes of its own.
            wait_until(self.settled, 30, "one master, the others its replicas")
            self.down = None
        return target

    def settled(self) -> bool:
        """Every Sentinel names the same master, and every other server is a replica."""
        named = set()
        for sentinel in self.sentinels:
            try:
                with client(sentinel) as each:
                    named.add(
                        each.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)[1]
                    )
            except redis.RedisError:
                return False
        if len(named) != 1:
            return False
        port = int(named.pop())
        return all(demoted(s) for s in self.servers if s.port != port)

    def failover(self) -> str:
        before = self.master()

        def accepted() -> bool:  # refused while a failover is on or no replica is ready
            with client(self.sentinels[0]) as sentinel:
                try:
                    sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
                except redis.ResponseError:
                    return False
            return True

        wait_until(accepted, 30, "SENTINEL FAILOVER accepted")
        wait_until(lambda: self.master() is not before, 30, "SENTINEL FAILOVER done")
        wait_until(self.settled, 30, "the old master follows the new one")
        return f"master :{before.port} -> :{self.master().port}"

    def primary_clients(self) -> list[redis.Redis]:
        return [client(self.master())]

    def close(self) -> None:
        for server in [*self.sentinels, *self.servers]:
            if server.process is not None:
                server.process.send_signal(signal.SIGCONT)
            server.close()


class Cluster:
    name = "cluster"
    kinds = ("redis-failover", "redis-migrate")

    def __init__(self, claim_replicas: int) -> None:
        self.claim_replicas = claim_replicas
        self.cluster = ClusterServers(3, replicated=True, node_timeout_ms=3000, extra=DURABLE)
        self.rng = random.Random(7)
        self.turn = 0
        self.down: RedisServer | None = None
        self.heirs: list[RedisServer] = []  # the replicas of the master killed last

    def start(self) -> None:
        self.cluster.start()

    def nodes(self) -> list[RedisServer]:
        return [*self.cluster.servers, *self.cluster.replicas]

    def masters(self) -> list[RedisServer]:
        """The nodes that are masters now (failovers swap roles)."""
        found = []
        for server in self.nodes():
            if server.process is None or server.process.poll() is not None:
                continue
            try:
                with client(server) as each:
                    if each.info("replication")["role"] == "master":
                        found.append(server)
            except redis.RedisError:
                continue
        return found

    def proxy_target(self) -> int | None:
        return None  # a Cluster redirects clients to its nodes' own addresses

    def gateway_redis(self, port: int | None = None) -> dict[str, Any]:
        return {"cluster": {"nodes": self.cluster.nodes}, **replicas(self)}

    def next_master(self) -> RedisServer:
        masters = self.masters()
        self.turn += 1
        return masters[self.turn % len(masters)]

    def kill(self) -> str:
        self.down = self.next_master()
        self.heirs = self.replicas_of(self.down)
        self.down.stop(kill=True)
        return f"master :{self.down.port} (failover)"

    def replicas_of(self, master: RedisServer) -> list[RedisServer]:
        master_id = node_id(master)
        return [s for s in self.nodes() if s is not master and replica_of(s) == master_id]

    def recover(self) -> None:
        """Wait until a replica of the killed master took its slots, then start it: it
        rejoins as a replica of the node that took them."""
        assert self.down is not None
        down, heirs = self.down, self.heirs

        def taken_over() -> bool:
            return any(heir in self.masters() for heir in heirs) and self.state_ok(down)

        wait_until(taken_over, 30, "its replica took its slots")
        down.start(timeout=30)
        wait_until(lambda: demoted(down), 30, "the old master follows the new one")
        self.down = None

    def state_ok(self, exclude: RedisServer | None = None) -> bool:
        for server in self.nodes():
            if server is exclude:
                continue
            try:
                with client(server) as each:
                    if "cluster_state:ok" not in each.execute_command("CLUSTER", "INFO").decode():
                        return False
            except redis.RedisError:
                return False
        return True

    def pause(self, sig: signal.Signals) -> str:
        if sig == signal.SIGSTOP:
            self.down = self.next_master()
        assert self.down is not None and self.down.process is not None
        self.down.process.send_signal(sig)
        target = f"master :{self.down.port}"
        if sig == signal.SIGCONT:
            self.down = None
        return target

    def failover(self) -> str:
        """CLUSTER FAILOVER on an in-sync replica of a master: the two swap roles, nothing
        lost."""
        master = self.next_master()
        replica = self.replicas_of(master)[0]
        wait_until(lambda: in_sync(replica), 30, "the replica in sync before its failover")
        with client(replica) as each:
            each.execute_command("CLUSTER", "FAILOVER")
        wait_until(lambda: replica in self.masters(), 30, "CLUSTER FAILOVER done")
        wait_until(lambda: demoted(master), 30, "the old master follows the new one")
        return f"master :{master.port} -> :{replica.port}"

    def migrate(self) -> str:
        """Move MIGRATED_SLOTS slots, keys and all, from one master to another under load."""
        masters = self.masters()
        source, target = self.rng.sample(masters, 2)
        with client(source) as each:
            owned = [
                slot
                for start, end, (_, port, *_), *_ in each.execute_command("CLUSTER", "SLOTS")
                if port == source.port
                for slot in range(start, end + 1)
            ]
        first = self.rng.randrange(len(owned) - MIGRATED_SLOTS)
        moved = 0
        for slot in owned[first : first + MIGRATED_SLOTS]:
            hold_migrating(masters, slot, source, target)
            moved += finish_migration(masters, slot, source, target)
        return f"{MIGRATED_SLOTS} slots, {moved} keys :{source.port} -> :{target.port}"

    def primary_clients(self) -> list[redis.Redis]:
        return [client(server) for server in self.masters()]

    def close(self) -> None:
        for server in self.nodes():
            if server.process is not None:
                server.process.send_signal(signal.SIGCONT)
        self.cluster.close()


def demoted(server: RedisServer) -> bool:
    """`server` is a replica now: it takes no more writes of its own."""
    try:
        with client(server) as each:
            return bool(each.info("replication").get("role") == "slave")
    except redis.RedisError:
        return False


def in_sync(server: RedisServer) -> bool:
    try:
        with client(server) as each:
            return bool(each.info("replication").get("master_link_status") == "up")
    except redis.RedisError:
        return False


def replica_of(server: RedisServer) -> str:
    with client(server) as each:
        for line in each.execute_command("CLUSTER", "NODES").decode().splitlines():
            fields = line.split()
            if "myself" in fields[2]:
                return fields[3]
    return "-"


def replicas(topology: Sentinel | Cluster) -> dict[str, Any]:
    if not topology.claim_replicas:
        return {}
    return {"claim_replicas": topology.claim_replicas, "claim_replicas_timeout": "300ms"}


def make_topology(name: str, claim_replicas: int = 0) -> Topology:
    if name == "single":
        return Single()
    if name == "sentinel":
        return Sentinel(claim_replicas)
    if name == "cluster":
        return Cluster(claim_replicas)
    raise ValueError(name)
