"""Building the redis-py asyncio client for the configured topology.

One node (`redis://`, `rediss://`, `unix://`), a master found through Sentinel, or a
Redis Cluster. Each client holds one pool sized from the settings: connections are made
once and reused, never per request.
"""

from __future__ import annotations

from typing import Any, cast

from mypy_extensions import mypyc_attr
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway.config.settings import RedisSettings

RedisClient = Redis | RedisCluster


class SentinelBlockingPool(SentinelConnectionPool, BlockingConnectionPool):
    """The Sentinel-managed master pool, waiting for a free connection like the others."""


@mypyc_attr(native_class=False)  # redis-py's connections have __slots__
class FollowsMaster(SentinelManagedConnection):
    """A connection to the master that Sentinel names, which follows it when it moves.

    A failover closes the clients of the demoted master. redis-py opens such a connection
    again to the address it had (redis-py#3874) and asks Sentinel only for new connections,
    so the gateway's connections went back to the demoted master, where every claim is
    refused (READONLY), for as long as they stayed open.
    """

    async def _connect(self) -> None:
        if self.connection_pool.is_master:  # each time, not only for a new connection
            self.host, self.port = await self.connection_pool.get_master_address()
        await super()._connect()  # type: ignore[no-untyped-call]  # untyped in redis 8.1


@mypyc_attr(native_class=False)
class FollowsMasterTLS(FollowsMaster, SentinelManagedSSLConnection):
    """The same over TLS."""


class SentinelMaster(Redis):
    """The master's client; closing it also closes the connections to the sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        pool = self.connection_pool
        assert isinstance(pool, SentinelConnectionPool)
        manager = pool.sentinel_manager
        await super().aclose(close_connection_pool)
        for sentinel in manager.sentinels:
            await sentinel.aclose()


def _host_port(node: str) -> tuple[str, int]:
    host, _, port = node.rpartition(":")
    return host.strip("[]"), int(port)


def tls_options(settings: RedisSettings) -> dict[str, Any]:
    """redis-py's ssl_* connection options from `redis.tls` (empty when TLS is off)."""
    tls = settings.tls
    if not (tls.enabled or settings.url.startswith("rediss://")):
        return {}
    return {
        "ssl_ca_certs": tls.ca,
        "ssl_certfile": tls.cert,
        "ssl_keyfile": tls.key,
        "ssl_cert_reqs": "required" if tls.verify else "none",
        "ssl_check_hostname": tls.verify,
    }


def _common(settings: RedisSettings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "socket_connect_timeout": settings.connect_timeout,
        "socket_timeout": settings.socket_timeout,
    }
    if settings.username is not None:
        options["username"] = settings.username
    if settings.password is not None:
        options["password"] = settings.password
    return options


def make_client(settings: RedisSettings, url: str) -> RedisClient:
    """The client for `settings`; `url` is where a single node is (the embedded one resolved).

    One immediate retry replaces a connection that a restart or failover broke; the scripts
    recognise their own token, so a repeated call is harmless.
    """
    if settings.cluster is not None:
        return _cluster(settings)
    if settings.sentinel is not None:
        return _sentinel_master(settings)
    options = {**_common(settings), **tls_options(settings)}
    if options.get("ssl_cert_reqs") and not url.startswith("rediss://"):
        options["connection_class"] = SSLConnection  # tls.enabled on a redis:// URL
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=settings.max_connections,
        timeout=settings.pool_timeout,
        retry=Retry(NoBackoff(), 1),
        **options,
    )
    return Redis.from_pool(pool)  # the client owns the pool and closes it


def _sentinel_master(settings: RedisSettings) -> Redis:
    """A client of the master that Sentinel names; it asks again after a failover."""
    sentinel = settings.sentinel
    assert sentinel is not None
    tls = tls_options(settings)
    sentinel_options: dict[str, Any] = {
        "socket_connect_timeout": settings.connect_timeout,
        "socket_timeout": settings.socket_timeout,
        **tls,
    }
    if tls:
        sentinel_options["ssl"] = True
    if sentinel.password is not None:
        sentinel_options["password"] = sentinel.password
    manager = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
        [_host_port(node) for node in sentinel.nodes],
        sentinel_kwargs=sentinel_options,
        **_common(settings),
        **tls,
        ssl=bool(tls),
    )
    return cast(
        Redis,
        manager.master_for(
            sentinel.service,
            redis_class=SentinelMaster,
            connection_pool_class=SentinelBlockingPool,
            connection_class=FollowsMasterTLS if tls else FollowsMaster,
            max_connections=settings.max_connections,
            timeout=settings.pool_timeout,
            retry=Retry(NoBackoff(), 1),
        ),
    )


def _cluster(settings: RedisSettings) -> RedisCluster:
    """A Cluster client: it learns the slot map from the seeds and follows MOVED/ASK."""
    cluster = settings.cluster
    assert cluster is not None
    tls = tls_options(settings)
    return RedisCluster(
        startup_nodes=[ClusterNode(*_host_port(node)) for node in cluster.nodes],
        max_connections=settings.max_connections,  # per node
        ssl=bool(tls),
        **tls,
        **_common(settings),
    )
