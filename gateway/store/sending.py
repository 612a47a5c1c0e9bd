"""How the Store's script calls reach Redis: one interface, `Sender`, and one implementation
per way of sending. The Store is given one; `sender_for` picks it from the settings:

- `OneByOne`: one EVALSHA per call, on redis-py's pooled connections;
- `Pipelined`: the calls of one loop turn as one pipeline, on the gateway's own RESP
  connection (`resp_pipeline`, one node) or on redis-py's (`redispy_pipeline`);
- `ClusterScripts` (`cluster`): on the primary of the key's slot, redirects followed.

Each can also run a script followed by WAIT on the same connection (how many replicas
acknowledged the write), and names the circuit breaker that guards a key's node.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool

from gateway.config.settings import PipelineClient
from gateway.store.breaker import Circuit, CircuitBreaker
from gateway.store.cluster import ClusterScripts
from gateway.store.redispy_pipeline import RedisPyPipeline
from gateway.store.resp import Endpoint
from gateway.store.resp_pipeline import RespPipeline
from gateway.store.scripts import Script

SendCall = Callable[[Script, str, tuple[Any, ...]], Awaitable[Any]]


class Sender(Protocol):
    # An attribute rather than a method, so that the Store calls the path's own function:
    # no frame of ours between a request and its pipeline.
    call: SendCall

    async def call_and_wait(
        self, script: Script, key: str, args: tuple[Any, ...], replicas: int, wait_ms: int
    ) -> tuple[Any, Any]:
        """The script's reply and the WAIT's (each an exception when it failed), sent down
        one connection: WAIT counts the writes of its own connection."""
        ...

    def breaker(self, key: str) -> CircuitBreaker:
        """The breaker of the node that holds `key`."""
        ...

    @property
    def circuit(self) -> Circuit:
        """The breaker state the metrics show: the worst node's."""
        ...

    async def close(self) -> None: ...


class OneByOne:
    """Each call its own EVALSHA on a pooled connection of one node (or Sentinel's master)."""

    def __init__(self, client: Redis, breaker: CircuitBreaker) -> None:
        self._client = client
        self._breaker = breaker
        self.call: SendCall = self._evalsha

    async def _evalsha(self, script: Script, key: str, args: tuple[Any, ...]) -> Any:
        return await self._client.evalsha(script.sha, script.keys, key, *args)

    async def call_and_wait(
        self, script: Script, key: str, args: tuple[Any, ...], replicas: int, wait_ms: int
    ) -> tuple[Any, Any]:
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.execute_command("EVALSHA", script.sha, script.keys, key, *args)
            pipe.execute_command("WAIT", replicas, wait_ms)
            reply, acked = await pipe.execute(raise_on_error=False)
        return reply, acked

    def breaker(self, key: str) -> CircuitBreaker:
        return self._breaker

    @property
    def circuit(self) -> Circuit:
        return self._breaker

    async def close(self) -> None:
        return None  # the pool is the client's, closed with it


class Pipelined(OneByOne):
    """The calls of one loop turn as one pipeline, on `batches`. A call followed by WAIT
    still goes alone, on a pooled connection (WAIT counts its own connection's writes)."""

    def __init__(
        self, client: Redis, breaker: CircuitBreaker, batches: RespPipeline | RedisPyPipeline
    ) -> None:
        super().__init__(client, breaker)
        self.batches = batches
        self.call = batches.call

    async def close(self) -> None:
        await self.batches.close()


def sender_for(
    client: Redis | RedisCluster,
    breaker: CircuitBreaker,
    *,
    pipeline: bool = True,
    pipeline_client: PipelineClient = "resp",
    timeout: float = 1.0,
) -> Sender:
    """The way calls go to `client`: a Cluster's go to many nodes, one by one; with `pipeline`,
    batched on the gateway's RESP connection (`resp`) or on redis-py's (always for Sentinel,
    whose master moves, as redis-py's pool follows); else one by one. `timeout`: a call's
    deadline in a pipeline (the client's own socket timeout holds the others)."""
    if isinstance(client, RedisCluster):
        return ClusterScripts(client, breaker)
    if not pipeline:
        return OneByOne(client, breaker)
    if pipeline_client == "resp" and not isinstance(client.connection_pool, SentinelConnectionPool):
        return Pipelined(client, breaker, RespPipeline(Endpoint.of(client), timeout))
    return Pipelined(client, breaker, RedisPyPipeline(client, timeout))
