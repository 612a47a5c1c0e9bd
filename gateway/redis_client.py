"""Building the redis-py asyncio client from the settings."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .config import RedisSettings


def make_client(settings: RedisSettings, url: str) -> Redis:
    """A client with a bounded, blocking pool and short timeouts.

    The pool waits up to `pool_timeout` for a free connection instead of failing at its
    size. One immediate retry replaces a connection that a Redis restart broke; the
    scripts recognise their own token, so a repeated call is harmless.
    """
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=settings.max_connections,
        timeout=settings.pool_timeout,
        socket_connect_timeout=settings.connect_timeout,
        socket_timeout=settings.socket_timeout,
        retry=Retry(NoBackoff(), 1),
    )
    return Redis.from_pool(pool)  # the client owns the pool and closes it
