"""Redis memory per idempotency record: `MEMORY USAGE` of real records of a few body sizes.

Records are claimed and completed through the gateway's own Store (the Lua scripts), with
the headers an upstream JSON API typically sends, on a redis-server started for the run.

    python -m loadtest.record_memory [--count 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics

import redis

from gateway.config.settings import RedisSettings
from gateway.core.keys import digest, record_key
from gateway.core.record import Record
from gateway.store.breaker import CircuitBreaker
from gateway.store.client import make_client
from testkit.redis_server import RedisServer
from testkit.stores import make_store

SIZES = (0, 100, 1024, 10 * 1024, 64 * 1024)  # 64 KiB is the default inline_max
HEADERS = [
    ("Content-Type", "application/json; charset=utf-8"),
    ("Date", "Sun, 22 Nov 2026 05:00:00 GMT"),
    ("Server", "upstream/1.0"),
    ("X-Request-Id", "0123456789abcdef0123456789abcdef"),
]


async def fill(url: str, size: int, count: int) -> list[str]:
    store = make_store(make_client(RedisSettings(url=url), url), CircuitBreaker(5, 1.0))
    keys = []
    try:
        for i in range(count):
            body = os.urandom(size)
            key = record_key("idem", "payments", digest("tenant"), f"order-{size}-{i}")
            token = os.urandom(16).hex()
            claim = await store.claim(key, digest(body), token, 30.0)
            assert claim.outcome.value == "CLAIMED"
            record = Record(201, HEADERS, size, hashlib.sha256(body).hexdigest(), None, 1.7e9)
            assert await store.complete(key, token, record, body, 86400.0)
            keys.append(key)
    finally:
        await store.close()
    return keys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="records per body size")
    args = parser.parse_args()
    server = RedisServer()
    server.start()
    client = redis.Redis.from_url(server.url)
    try:
        print(f"redis-server {client.info('server')['redis_version']}, {args.count} records each")
        print("| body bytes | MEMORY USAGE per record (bytes) | used_memory growth per record |")
        print("|---:|---:|---:|")
        for size in SIZES:
            client.flushall()
            before = client.info("memory")["used_memory"]
            keys = asyncio.run(fill(server.url, size, args.count))
            after = client.info("memory")["used_memory"]
            usage = [client.memory_usage(key, samples=0) for key in keys[:200]]
            print(
                f"| {size} | {statistics.median(usage):.0f} | {(after - before) / len(keys):.0f} |"
            )
    finally:
        client.close()
        server.close()


if __name__ == "__main__":
    main()
