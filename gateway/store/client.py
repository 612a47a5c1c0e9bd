"""Building the redis-py asyncio client for the configured topology.

One node (`redis://`, `rediss://`, `unix://`), a master found through Sentinel, or a
Redis Cluster. Each client holds one pool sized from the settings: connections are made
once and reused, never per request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import SSLConnection
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from gateway.config.settings import RedisSettings
from gateway.store.sentinel import (
    FollowsMaster,
    FollowsMasterTLS,
    LatestEpoch,
    SentinelBlockingPool,
    SentinelMaster,
)

RedisClient = Redis | RedisCluster

log = logging.getLogger(__name__)


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
    """A client of the master that Sentinel names; it follows a failover once its
    `follow()` runs (gateway/store/sentinel.py)."""
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
    manager = LatestEpoch(  # type: ignore[no-untyped-call,unused-ignore]
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


async def close_client(client: RedisClient) -> None:
    """Close `client` and every connection it holds. redis-py fails its close when one
    connection takes longer than the connect timeout to close (a busy machine): a pool has
    still closed the others, but a Cluster's close stops there and leaves its startup nodes
    open. Those are closed here too; what was slow is closing all the same, and is logged."""
    try:
        await client.aclose()
    except (TimeoutError, RedisError, OSError) as exc:
        log.warning("redis: connections slow to close at the end: %s", exc)
        if isinstance(client, RedisCluster):
            manager = client.nodes_manager
            nodes = {*manager.startup_nodes.values(), *manager.nodes_cache.values()}
            await asyncio.gather(*(node.disconnect() for node in nodes), return_exceptions=True)
