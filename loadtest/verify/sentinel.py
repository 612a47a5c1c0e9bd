"""`--topology sentinel`: a master, two replicas and three Sentinels (quorum 2) that fail
over after 1 s of silence, all with `appendfsync always`."""

from __future__ import annotations

import signal
from typing import Any

import redis

from loadtest.verify.replication import demoted, replicas
from loadtest.verify.topology import DURABLE
from testkit.polling import wait_until
from testkit.redis_server import RedisServer
from testkit.topologies import client, start_all

SERVICE = "idem-verify"


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
        return {"sentinel": {"nodes": nodes, "service": SERVICE}, **replicas(self.claim_replicas)}

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
