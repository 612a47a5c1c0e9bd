"""Helpers for the fault tests: reading Redis and metrics, filling Redis and a disk, an
outcome for the journal."""

from __future__ import annotations

import os
from pathlib import Path

import redis
from aiohttp.test_utils import TestClient

from gateway.core.record import Record
from gateway.http.app import METRICS
from gateway.store.journal import Unstored
from gateway.telemetry.metrics import Metrics


def redis_keys(url: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return list(client.scan_iter())
    finally:
        client.close()


def redis_clients(url: str) -> int:
    """How many connections Redis has besides the one asking."""
    client = redis.Redis.from_url(url)
    try:
        return len(client.client_list()) - 1
    finally:
        client.close()


def records(url: str) -> list[dict[bytes, bytes]]:
    """Every idempotency record's fields (one HASH per key; the console's attention index,
    `...:attention:<route>`, is no record)."""
    client = redis.Redis.from_url(url)
    try:
        return [client.hgetall(key) for key in client.scan_iter() if b":attention:" not in key]
    finally:
        client.close()


def state(url: str) -> bytes | None:
    """The state field (P, C or U) of the one record in Redis, None when there is none."""
    found = records(url)
    assert len(found) <= 1, found
    return found[0].get(b"s") if found else None


def metrics_of(client: TestClient) -> Metrics:
    return client.server.app[METRICS]


def value(metrics: Metrics, name: str, **labels: str) -> float:
    """A sample of the gateway's registry (0 when it was never counted)."""
    return metrics.registry.get_sample_value(name, labels) or 0.0


def fill(folder: Path, leave: int = 0) -> None:
    """Write to `folder` until its file system has about `leave` bytes free (none: until it
    refuses a byte more). Meant for a small tmpfs: it writes what the disk has free."""
    disk = os.statvfs(folder)
    free = disk.f_bavail * disk.f_frsize
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"\0" * max(0, free - leave))
        if not leave:
            for _ in range(4096):  # the last bytes of a page
                try:
                    os.write(fd, b"\0")
                except OSError:
                    break
    finally:
        os.close(fd)


def fill_to_maxmemory(plain: redis.Redis) -> None:
    """`noeviction` at the memory in use now, then filled until Redis refuses even a tiny
    write (large values first: a refused command's own buffer no longer counts after it)."""
    plain.config_set("maxmemory-policy", "noeviction")
    plain.config_set("maxmemory", int(plain.info("memory")["used_memory"]) + 256 * 1024)
    count = 0
    for size in (16 * 1024, 1024, 64, 1):
        while True:
            count += 1
            assert count < 100_000, "Redis never refused a write"
            try:
                plain.set(f"filler:{count}", b"x" * size)
            except redis.exceptions.OutOfMemoryError:
                break


def outcome(key: str, body: bytes = b"{}") -> Unstored:
    """An outcome for the journal: a 201 with `body`, under `key` and a token of its own."""
    return Unstored(key, f"token-{key}", "fp", Record(201, [], len(body), ""), body, 60.0)
