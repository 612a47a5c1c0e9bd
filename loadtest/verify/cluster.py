"""`--topology cluster`: three masters with a replica each, all with `appendfsync always`;
failovers, and slots migrated under load."""

from __future__ import annotations

import random
import signal
from typing import Any

import redis

from loadtest.verify.replication import demoted, in_sync, replica_of, replicas
from loadtest.verify.topology import DURABLE
from testkit.polling import wait_until
from testkit.redis_server import RedisServer
from testkit.topologies import (
    ClusterServers,
    client,
    finish_migration,
    hold_migrating,
    node_id,
)

MIGRATED_SLOTS = 64  # moved at once by one `redis-migrate`: the source's fullest


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
        return {"cluster": {"nodes": self.cluster.nodes}, **replicas(self.claim_replicas)}

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
        """Move the MIGRATED_SLOTS slots that hold the most keys, keys and all, from one
        master to another under load (slots picked at random held a key or two at most)."""
        masters = self.masters()
        source, target = self.rng.sample(masters, 2)
        with client(source) as each:
            owned = [
                slot
                for start, end, (_, port, *_), *_ in each.execute_command("CLUSTER", "SLOTS")
                if port == source.port
                for slot in range(start, end + 1)
            ]
            pipe = each.pipeline(transaction=False)
            for slot in owned:
                pipe.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
            counts = pipe.execute()
        fullest = sorted(zip(counts, owned, strict=True), reverse=True)[:MIGRATED_SLOTS]
        moved = 0
        for _, slot in fullest:
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
