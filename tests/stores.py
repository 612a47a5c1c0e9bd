"""The one place the tests build a `Store` (the only code that talks to Redis) without a
gateway around it: a change of Store's constructor is one edit here."""

from __future__ import annotations

from typing import Any

from gateway.config.settings import RedisSettings
from gateway.store.breaker import CircuitBreaker
from gateway.store.client import make_client
from gateway.store.store import Store


def make_store(
    url: str = "",
    settings: RedisSettings | None = None,
    breaker: CircuitBreaker | None = None,
    **options: Any,
) -> Store:
    """A Store on the Redis at `url` (a Cluster's: "" with `settings.cluster`), its client
    made from `settings` (the defaults unless given) as the gateway makes it. The breaker
    stays out of the way unless a test gives its own; `options` go to Store as they are
    (pipeline, lean, timeout, replicas, replicas_timeout)."""
    client = make_client(settings or RedisSettings(), url)
    return Store(client, breaker or CircuitBreaker(1000, 1.0), **options)
