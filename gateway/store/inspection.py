"""What operators and the start-up checks read of Redis, beside the state machine: a record's
raw fields, a purge, whether Redis answers and how it evicts."""

from __future__ import annotations

import asyncio
from typing import Any, Final

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import RedisError

from gateway.errors import StoreUnavailable

# redis-py's Cluster client can also fail with AttributeError or RuntimeError when it resets
# a node's connections after an error while other calls are still connecting on them.
FAILURES: Final = (RedisError, OSError, asyncio.TimeoutError, AttributeError, RuntimeError)


class Inspection:
    """Reads and deletes of whole records on `client`, outside the scripts."""

    client: Redis | RedisCluster

    async def inspect(self, key: str) -> tuple[dict[bytes, bytes], int]:
        """The raw fields of a record and its TTL in ms, for operators."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hgetall(key)
                pipe.pttl(key)
                fields, pttl = await pipe.execute()
        except FAILURES as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        return fields, int(pttl)

    async def purge(self, key: str) -> bool:
        try:
            return bool(await self.client.delete(key))
        except FAILURES as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def eviction_policies(self) -> set[str] | None:
        """Every data node's `maxmemory-policy`; None when Redis does not say (unreachable,
        or CONFIG refused, as on some managed services)."""
        try:
            if isinstance(self.client, RedisCluster):
                replies: Any = await self.client.config_get(
                    "maxmemory-policy", target_nodes=RedisCluster.PRIMARIES
                )
                # One reply per node, keyed by node name; or one, when a single node answered.
                per_node = replies.values() if "maxmemory-policy" not in replies else [replies]
                return {str(reply.get("maxmemory-policy", "")) for reply in per_node}
            reply: Any = await self.client.config_get("maxmemory-policy")
        except FAILURES:
            return None
        return {str(reply.get("maxmemory-policy", ""))}

    async def min_replicas(self) -> tuple[int, int] | None:
        """The master's `min-replicas-to-write` and `min-replicas-max-lag`; None when Redis
        does not say."""
        try:
            reply: Any = await self.client.config_get("min-replicas-*")
            return int(reply["min-replicas-to-write"]), int(reply["min-replicas-max-lag"])
        except (*FAILURES, KeyError, ValueError):
            return None

    async def unusable(self) -> str | None:
        """Why Redis does not answer a PING (refused, a wrong password, no such db), or None."""
        try:
            await self.client.ping()
        except FAILURES as exc:
            return f"{type(exc).__name__}: {exc}"
        return None
