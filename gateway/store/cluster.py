"""Running a script on a Redis Cluster: on the primary that holds its key's slot, with ASK and
MOVED followed here rather than by redis-py's Cluster client.

redis-py sends the ASKING of an ASK redirect as a command of its own, on whichever pooled
connection is free. Under load the script then leaves on another connection, the importing
node answers MOVED back to the migrating one, and every few MOVED answers the client closes
every connection of every node, under calls still using them ("'NoneType' object has no
attribute 'writelines'"), until "TTL exhausted". Here ASKING, the script and (with replicas)
its WAIT go down one connection in one round trip: the redirect holds, and the WAIT counts
the writes of the node that ran the script. A MOVED re-reads the slot map, once for a burst,
and closes no connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode, PipelineCommand
from redis.cluster import PRIMARY
from redis.exceptions import (
    AskError,
    ClusterError,
    MovedError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.core.backoff import CLUSTER_TRY_AGAIN, Pauses
from gateway.store.breaker import CircuitBreaker, NodeBreakers
from gateway.store.scripts import Script

log = logging.getLogger(__name__)

# Redirects one call follows before it gives up (a slot moves once; a failover once more).
REDIRECTS: Final = 5


class SlotMoving(Exception):
    """A call naming two keys met their slot moving key by key (TRYAGAIN): the importing node
    refuses it until the move ends, however long that takes, so it is not made again. The
    caller names its keys one at a time instead (`Store.claim`)."""


class ClusterScripts:
    """EVALSHA (and WAIT) on the node that owns a key, following redirects on one connection."""

    def __init__(self, client: RedisCluster, breaker: CircuitBreaker) -> None:
        self._client = client
        self.breakers = NodeBreakers(breaker)  # one per node, each like `breaker`
        self._refresh_lock = asyncio.Lock()
        self._refreshes = 0  # slot-map readings so far
        self.call: Callable[[Script, str, tuple[Any, ...]], Awaitable[Any]] = self._call

    async def _call(self, script: Script, key: str, args: tuple[Any, ...]) -> Any:
        return (await self.run(script, key, args, None))[0]

    async def call_and_wait(
        self, script: Script, key: str, args: tuple[Any, ...], replicas: int, wait_ms: int
    ) -> tuple[Any, Any]:
        reply, acked = await self.run(script, key, args, (replicas, wait_ms))
        return reply, acked

    @property
    def circuit(self) -> NodeBreakers:
        return self.breakers

    async def close(self) -> None:
        return None  # the connections are the client's, closed with it

    def breaker(self, key: str) -> CircuitBreaker:
        """The breaker of the primary that the slot map names for `key` (before the map is
        read, the one all calls share)."""
        try:
            node = self._client.get_node_from_key(key)
        except (RedisClusterException, RedisError, KeyError, IndexError):
            node = None
        return self.breakers.of(None if node is None else str(node.name))

    async def run(
        self, script: Script, key: str, args: tuple[Any, ...], wait: tuple[int, int] | None
    ) -> list[Any]:
        """The reply of the script and, with `wait` (replicas, ms), of the WAIT that followed
        it on the same connection (an exception when the WAIT failed: the caller weighs it).
        An error reply of the script is raised."""
        await self._client.initialize()  # reads the slot map if it has not been read
        owner = self._client.get_node_from_key(key)
        if owner is None:
            raise ClusterError("no node holds the key's slot")
        node: ClusterNode = owner
        asking = False
        pauses: Pauses | None = None  # drawn only for a TRYAGAIN
        for _ in range(REDIRECTS):
            commands = [PipelineCommand(0, "ASKING")] if asking else []
            commands.append(
                PipelineCommand(len(commands), "EVALSHA", script.sha, script.keys, key, *args)
            )
            if wait is not None:
                commands.append(PipelineCommand(len(commands), "WAIT", *wait))
            refreshes = self._refreshes
            try:
                await node.execute_pipeline(commands)
            except (RedisConnectionError, RedisTimeoutError, OSError) as failure:
                await self._refresh(refreshes)  # a failover may have moved the slot
                raise failure  # named: a bare raise after an await re-raises the wrong one compiled
            replies = [command.result for command in commands[1 if asking else 0 :]]
            reply = replies[0]
            if isinstance(reply, MovedError):  # before AskError: a subclass of it in redis 6
                await self._refresh(refreshes)
                node, asking = await self._node(reply.host, reply.port, refreshes), False
                continue
            if isinstance(reply, AskError):
                node, asking = await self._node(reply.host, reply.port, refreshes), True
                continue
            if isinstance(reply, TryAgainError):
                if len({key, *args[: script.keys - 1]}) > 1:  # refused until the slot has moved
                    raise SlotMoving(str(reply))
                pauses = pauses or CLUSTER_TRY_AGAIN.pauses()  # a key moving as the call came
                await asyncio.sleep(pauses.next())
                continue
            if isinstance(reply, RedisConnectionError | RedisTimeoutError):
                await self._refresh(refreshes)
            if isinstance(reply, Exception):
                raise reply
            return replies  # a WAIT's own failure is the caller's to weigh
        raise ClusterError(f"still redirected after {REDIRECTS} tries")

    async def _node(self, host: str, port: int, refreshes: int) -> ClusterNode:
        """The node a redirect names. One the slot map does not list yet is taken on the
        cluster's word, as redis-py does: a map read while a replica took over may have left the
        new master out, and reading it again may not list it either until the switch settles."""
        node = self._client.get_node(host=host, port=port)
        if node is None:
            await self._refresh(refreshes)
            node = self._client.get_node(host=host, port=port)
        if node is None:
            manager = self._client.nodes_manager
            node = ClusterNode(host, port, PRIMARY, **manager.connection_kwargs)
            manager.set_nodes(manager.nodes_cache, {node.name: node})
        return node

    async def _refresh(self, refreshes_before: int) -> None:
        """Read the slot map again, once for the calls that asked for it at the same time."""
        async with self._refresh_lock:
            if self._refreshes != refreshes_before:
                return  # read by another call meanwhile
            try:
                await self._client.nodes_manager.initialize()
            except (RedisClusterException, RedisError, OSError) as exc:
                log.warning("could not read the cluster's slot map: %s", exc)
            self._refreshes += 1
