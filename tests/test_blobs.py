"""Large bodies: streamed through, kept inline or in a blob store, replayed byte for byte.

Each test runs against a file:// directory and an S3 bucket on a moto server (over HTTP,
SigV4-signed). Bodies are compared by SHA-256 while they stream, never held whole.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import random
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis
from aiohttp.test_utils import TestClient

from gateway.config.loading import settings_from_dict
from gateway.http.app import METRICS
from testkit.polling import until

from .blob_stores import StoredBlobs
from .faultkit import fill
from .gateways import GatewayFactory
from .upstream import CountingUpstream, blob_chunks

INLINE_MAX = 64 << 10
MiB = 1 << 20


def key(n: object) -> dict[str, str]:
    # In a tenant's scope: cookies are replayed within a scope, never in the anonymous one.
    return {"Idempotency-Key": f"k-{n}", "Authorization": "Bearer blobs"}


async def digest_of(resp: aiohttp.ClientResponse) -> tuple[int, str]:
    """Size and SHA-256 of a response body, read as it streams."""
    sha = hashlib.sha256()
    size = 0
    async for chunk in resp.content.iter_chunked(1 << 20):
        sha.update(chunk)
        size += len(chunk)
    return size, sha.hexdigest()


def expected(size: int, chunk: int = 262144, seed: str = "0") -> tuple[int, str]:
    sha = hashlib.sha256()
    for piece in blob_chunks(size, chunk, seed):
        sha.update(piece)
    return size, sha.hexdigest()


def record_fields(url: str) -> dict[bytes, bytes]:
    """The one record in Redis (each test starts with an empty Redis)."""
    client = redis.Redis.from_url(url)
    try:
        (only,) = list(client.scan_iter())
        return client.hgetall(only)
    finally:
        client.close()


async def completed(url: str, count: int = 1) -> None:
    """Wait until `count` records are stored: the client can have the last byte a moment
    before its record is complete."""

    def done() -> bool:
        client = redis.Redis.from_url(url)
        try:
            return sum(client.hget(k, "s") == b"C" for k in client.scan_iter()) >= count
        finally:
            client.close()

    await until(done)


def blob_errors(client: TestClient, reason: str) -> float:
    registry = client.server.app[METRICS].registry
    value = registry.get_sample_value("idem_blob_errors_total", {"route": "api", "reason": reason})
    return value or 0.0


SIZES = [0, 1, INLINE_MAX - 1, INLINE_MAX, INLINE_MAX + 1, 5 * MiB]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("framing", ["chunked", "length"])
async def test_replay_is_byte_exact(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs,
    redis_url: str,
    size: int,
    framing: str,
) -> None:
    counting, _ = upstream
    client = await make_gateway(blob=stored_blobs.config)
    # Odd chunk sizes so that inline_max falls inside a chunk.
    path = f"/stream?size={size}&chunk=10007" if framing == "chunked" else f"/blob?size={size}"
    first = await client.post(path, headers=key(size))
    assert first.status == 200
    sent = await digest_of(first)
    assert sent[0] == size
    if framing == "length":
        assert sent == expected(size)
        assert first.headers.getall("Set-Cookie") == ["b=2", "a=1", "b=3"]
    await completed(redis_url)
    replay = await client.post(path, headers=key(size))
    assert replay.status == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.headers["Content-Type"] == first.headers["Content-Type"]
    assert replay.content_length == size
    assert replay.headers.getall("Set-Cookie", []) == first.headers.getall("Set-Cookie", [])
    assert await digest_of(replay) == sent
    assert counting.count(path.split("?")[0]) == 1

    fields = record_fields(redis_url)
    meta = orjson.loads(fields[b"m"])
    assert (meta["n"], meta["d"]) == (size, sent[1])
    if size <= INLINE_MAX:
        assert meta["blob"] is None
        assert len(fields[b"b"]) == size
        assert stored_blobs.names() == []
    else:
        assert fields[b"b"] == b""
        assert stored_blobs.names() == [meta["blob"]]
    assert stored_blobs.unfinished() == []


async def test_hundred_mib_replay_is_byte_exact(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    counting, _ = upstream
    client = await make_gateway(blob=stored_blobs.config)
    size = 100 * MiB
    path = f"/blob?size={size}&chunk={MiB}"
    first = await client.post(path, headers=key("big"))
    assert first.status == 200
    assert await digest_of(first) == expected(size, MiB)
    await completed(redis_url)
    replay = await client.post(path, headers=key("big"))
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert await digest_of(replay) == expected(size, MiB)
    assert counting.count("/blob") == 1
    assert len(stored_blobs.names()) == 1
    registry = client.server.app[METRICS].registry
    assert registry.get_sample_value("idem_blob_written_bytes_total") == size
    await until(lambda: registry.get_sample_value("idem_blob_read_bytes_total") == size)


async def test_gzip_encoded_body_passes_untouched(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    client = await make_gateway(blob=stored_blobs.config)
    size = 3 * INLINE_MAX  # random bytes: the gzip stream stays over inline_max
    wire = gzip.compress(random.Random("0").randbytes(size), mtime=0)
    url = client.make_url(f"/gzip?size={size}")
    async with aiohttp.ClientSession(auto_decompress=False) as raw:
        async with raw.post(url, headers=key("gz")) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert await resp.read() == wire
        await completed(redis_url)
        async with raw.post(url, headers=key("gz")) as resp:
            assert resp.headers["Idempotent-Replayed"] == "true"
            assert resp.headers["Content-Encoding"] == "gzip"
            assert await resp.read() == wire
    assert len(stored_blobs.names()) == 1


async def test_response_over_max_recorded_body_reaches_the_client_and_is_not_replayed(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    counting, _ = upstream
    client = await make_gateway(blob=stored_blobs.config, max_recorded_body=300_000)
    for n, path in enumerate(["/blob?size=400000", "/stream?size=400000&chunk=10007"]):
        first = await client.post(path, headers=key(n))
        assert first.status == 200
        assert (await digest_of(first))[0] == 400_000
        await completed(redis_url, n + 1)
        again = await client.post(path, headers=key(n))
        assert again.status == 502
        doc = orjson.loads(await again.read())
        assert doc["type"].endswith("body-not-recorded")
        assert again.headers["Idempotent-Replayed"] == "true"
        assert counting.count(path.split("?")[0]) == 1
    assert stored_blobs.names() == []
    assert stored_blobs.unfinished() == []


async def test_deleted_blob_is_a_counted_502_before_any_byte(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    counting, _ = upstream
    client = await make_gateway(blob=stored_blobs.config)
    first = await client.post("/blob?size=200000", headers=key("del"))
    await first.read()
    await completed(redis_url)
    (name,) = stored_blobs.names()
    stored_blobs.remove(name)
    for _ in range(2):  # nothing released: each retry gets the same answer, upstream not called
        again = await client.post("/blob?size=200000", headers=key("del"))
        assert again.status == 502
        assert again.content_type == "application/problem+json"
        assert orjson.loads(await again.read())["type"].endswith("recorded-body-unavailable")
    assert blob_errors(client, "missing") == 2
    assert counting.count("/blob") == 1


async def test_corrupt_blob_cuts_the_replay_short_and_is_counted(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    client = await make_gateway(blob=stored_blobs.config)
    size = 3 * MiB
    first = await client.post(f"/blob?size={size}", headers=key("bad"))
    await first.read()
    await completed(redis_url)
    (name,) = stored_blobs.names()
    data = bytearray(stored_blobs.read(name))
    data[-1] ^= 0xFF  # same size, last byte flipped: found only at the end
    stored_blobs.replace(name, bytes(data))
    replay = await client.post(f"/blob?size={size}", headers=key("bad"))
    assert replay.status == 200  # the head went out before the digest could be checked
    with pytest.raises(aiohttp.ClientPayloadError):
        await replay.read()
    assert blob_errors(client, "corrupt") == 1


async def test_blob_of_the_wrong_size_is_a_502_before_any_byte(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    client = await make_gateway(blob=stored_blobs.config)
    first = await client.post("/blob?size=200000", headers=key("short"))
    await first.read()
    await completed(redis_url)
    (name,) = stored_blobs.names()
    stored_blobs.replace(name, stored_blobs.read(name)[:-1])
    again = await client.post("/blob?size=200000", headers=key("short"))
    assert again.status == 502
    assert again.content_type == "application/problem+json"
    assert blob_errors(client, "corrupt") == 1


async def test_cut_upstream_answer_leaves_no_blob(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs,
) -> None:  # fmt: skip
    client = await make_gateway(blob=stored_blobs.config, on_unknown_outcome="release")
    size = 6 * MiB  # over one S3 part: the multipart upload must be aborted too
    resp = await client.post(f"/blob?size={size}&cut=1", headers=key("cut"))
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    await until(lambda: not stored_blobs.names() and not stored_blobs.unfinished())


async def test_blob_of_an_outcome_that_could_not_be_stored_is_deleted(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    """A fenced owner's blob is deleted (no record points at it), and its client, whose head
    went out unmarked with the first part of the body, is cut short of the last bytes: no
    complete answer other than the record's, which its retry gets."""
    counting, _ = upstream
    client = await make_gateway(blob=stored_blobs.config)
    pending = asyncio.ensure_future(client.post("/blob?size=200000&gate=1", headers=key("lost")))
    await counting.entered.wait()
    plain = redis.Redis.from_url(redis_url)
    [record] = plain.keys()
    plain.hset(record, "t", "newer-owner")  # a newer claim holds the key: ours is fenced off
    plain.close()
    counting.release.set()
    resp = await pending
    assert "Idempotency-Outcome" not in resp.headers  # the head went before the fence
    with pytest.raises(aiohttp.ClientPayloadError):
        await digest_of(resp)
    await until(lambda: stored_blobs.names() == [])
    registry: Any = client.server.app[METRICS].registry
    await until(lambda: registry.get_sample_value("idem_lease_lost_total", {"route": "api"}) == 1)
    assert registry.get_sample_value("idem_fenced_completions_total", {"route": "api"}) == 1


async def test_blob_store_failure_still_answers_and_is_not_replayed(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    counting, _ = upstream
    client = await make_gateway(blob=stored_blobs.config)
    stored_blobs.break_store()
    first = await client.post("/blob?size=200000", headers=key("w"))
    assert first.status == 200
    assert await digest_of(first) == expected(200_000)
    await completed(redis_url)
    assert blob_errors(client, "write") == 1
    again = await client.post("/blob?size=200000", headers=key("w"))
    assert again.status == 502
    assert orjson.loads(await again.read())["type"].endswith("body-not-recorded")
    assert counting.count("/blob") == 1


async def test_record_naming_a_path_outside_the_store_is_refused(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    client = await make_gateway(blob=stored_blobs.config)
    first = await client.post("/blob?size=200000", headers=key("t"))
    await first.read()
    await completed(redis_url)
    plain = redis.Redis.from_url(redis_url)
    (rkey,) = list(plain.scan_iter())
    meta = orjson.loads(plain.hget(rkey, "m"))
    plain.hset(rkey, "m", orjson.dumps({**meta, "blob": "../../etc/passwd"}))
    plain.close()
    again = await client.post("/blob?size=200000", headers=key("t"))
    assert again.status == 502
    assert blob_errors(client, "missing") == 1


async def test_concurrent_large_answers_get_blobs_of_their_own(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str],
    stored_blobs: StoredBlobs, redis_url: str,
) -> None:  # fmt: skip
    counting, _ = upstream
    client = await make_gateway(blob=stored_blobs.config)
    paths = [f"/blob?size={300_000 + n}&seed={n}" for n in range(8)]

    async def fetch(n: int) -> tuple[int, str]:
        resp = await client.post(paths[n], headers=key(n))
        assert "Idempotent-Replayed" not in resp.headers
        return await digest_of(resp)

    firsts = await asyncio.gather(*(fetch(n) for n in range(8)))
    assert firsts == [expected(300_000 + n, seed=str(n)) for n in range(8)]
    await completed(redis_url, 8)
    assert len(stored_blobs.names()) == 8
    for n in range(8):
        resp = await client.post(paths[n], headers=key(n))
        assert resp.headers["Idempotent-Replayed"] == "true"
        assert await digest_of(resp) == firsts[n]
    assert counting.count("/blob") == 8


async def test_inline_body_that_does_not_match_its_digest_is_a_counted_502(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    client = await make_gateway()
    first = await client.post("/blob?size=1000", headers=key("in"))
    await first.read()
    await completed(redis_url)
    plain = redis.Redis.from_url(redis_url)
    (rkey,) = list(plain.scan_iter())
    body = bytearray(plain.hget(rkey, "b"))
    body[0] ^= 0xFF  # same size, other bytes
    plain.hset(rkey, "b", bytes(body))
    plain.close()
    again = await client.post("/blob?size=1000", headers=key("in"))
    assert again.status == 502
    assert again.content_type == "application/problem+json"
    assert blob_errors(client, "corrupt") == 1


async def test_a_blob_the_disk_cannot_hold_leaves_no_part_file(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], full_disk: Path
) -> None:
    """The blob folder's disk fills while an answer is written: the client still gets the
    whole answer, retries get 502 body-not-recorded (never a second run), and the failed
    write leaves no `.part` file to hold the full disk until the sweep, a day later."""
    counting, _ = upstream
    blobs = full_disk / "blobs"
    settings = settings_from_dict(
        {
            "redis": {"breaker": {"failures": 1000}},
            "blob": {"url": f"file://{blobs}"},
            "limits": {"client_buffer": "16MiB"},  # the client never falls behind here
            "routes": [{"name": "api", "path_prefix": "/", "upstream": upstream[1]}],
        }
    )
    client = await make_gateway(settings=settings)
    fill(full_disk, leave=64 << 10)
    first = await client.post("/blob?size=600000", headers=key("full"))
    assert first.status == 200
    assert (await digest_of(first)) == expected(600_000)
    again = await client.post("/blob?size=600000", headers=key("full"))
    assert again.status == 502
    assert orjson.loads(await again.read())["code"] == "body-not-recorded"
    assert counting.count("/blob") == 1
    assert sorted(path.name for path in blobs.iterdir()) == []
