"""Stores on the gateway's own pipelined RESP connection (`redis.pipeline_client: resp`), for
the tests that stand between it and the real Redis."""

from __future__ import annotations

from gateway.config.settings import RedisSettings
from gateway.store.resp_pipeline import RespPipeline
from gateway.store.store import Store
from testkit.stores import make_store


def resp_store(url: str, timeout: float = 5.0, connect_timeout: float = 5.0) -> Store:
    """A Store on the Redis at `url` whose calls go pipelined on a RESP connection of its own."""
    settings = RedisSettings(connect_timeout=connect_timeout, socket_timeout=timeout)
    store = make_store(url, settings, pipeline=True, pipeline_client="resp")
    assert isinstance(getattr(store.sender, "batches", None), RespPipeline)
    return store


def redis_port(url: str) -> int:
    """The port of a `redis://host:port/db` URL."""
    return int(url.rsplit(":", 1)[1].split("/")[0])
