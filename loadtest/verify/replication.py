"""What the replicated topologies share: a server's role and sync, and the gateway's
`claim_replicas` settings."""

from __future__ import annotations

from typing import Any

import redis

from testkit.redis_server import RedisServer
from testkit.topologies import client


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


def replicas(claim_replicas: int) -> dict[str, Any]:
    """The gateway's `redis.claim_replicas` settings, if any."""
    if not claim_replicas:
        return {}
    return {"claim_replicas": claim_replicas, "claim_replicas_timeout": "300ms"}
