"""The one place that builds a `Store` without a gateway around it, as the gateway builds one
(gateway/http/app.py): a change of the Store's constructor is one edit here."""

from __future__ import annotations

from redis.asyncio import Redis, RedisCluster

from gateway.config.settings import PipelineClient, RedisSettings
from gateway.store.breaker import CircuitBreaker
from gateway.store.client import make_client
from gateway.store.sending import sender_for
from gateway.store.store import Store


def make_store(
    url: str = "",
    settings: RedisSettings | None = None,
    breaker: CircuitBreaker | None = None,
    *,
    client: Redis | RedisCluster | None = None,
    pipeline: bool = False,
    pipeline_client: PipelineClient = "resp",
    timeout: float = 1.0,
    replicas: int = 0,
    replicas_timeout: float = 0.5,
) -> Store:
    """A Store on the Redis at `url` (a Cluster's: "" with `settings.cluster`), its client made
    from `settings` (the defaults unless given) as the gateway makes it, or on `client`. Its
    calls go one by one unless `pipeline` (then on `pipeline_client`'s connections); the
    breaker stays out of the way unless one is given."""
    if client is None:
        client = make_client(settings or RedisSettings(), url)
    sender = sender_for(
        client,
        breaker or CircuitBreaker(1000, 1.0),
        pipeline=pipeline,
        pipeline_client=pipeline_client,
        timeout=timeout,
    )
    return Store(client, sender, replicas=replicas, replicas_timeout=replicas_timeout)
