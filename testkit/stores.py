"""A `Store` for tests and benchmarks, built as the gateway builds one (gateway/http/app.py):
the one place that knows the Store's constructor."""

from __future__ import annotations

from redis.asyncio import Redis, RedisCluster

from gateway.store.breaker import CircuitBreaker
from gateway.store.sending import PipelineClient, sender_for
from gateway.store.store import Store


def make_store(
    client: Redis | RedisCluster,
    breaker: CircuitBreaker | None = None,
    *,
    pipeline: bool = False,
    pipeline_client: PipelineClient = "resp",
    timeout: float = 1.0,
    replicas: int = 0,
    replicas_timeout: float = 0.5,
) -> Store:
    """A Store on `client`, its calls one by one unless `pipeline` (then on `pipeline_client`'s
    connections); `breaker` defaults to one that a test does not trip."""
    sender = sender_for(
        client,
        breaker or CircuitBreaker(1000, 1.0),
        pipeline=pipeline,
        pipeline_client=pipeline_client,
        timeout=timeout,
    )
    return Store(client, sender, replicas=replicas, replicas_timeout=replicas_timeout)
