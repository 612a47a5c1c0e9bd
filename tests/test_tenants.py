"""Tenant scoping: the same key under two tenants is two records, never shared."""

from __future__ import annotations

import redis

from .gateways import GatewayFactory


async def test_two_tenants_same_key_get_their_own_answers(
    make_gateway: GatewayFactory, upstream, redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway(scope=["Authorization", "X-Tenant-Id"])
    a = {"Idempotency-Key": "shared", "Authorization": "Bearer secret-a", "X-Tenant-Id": "t"}
    b = {"Idempotency-Key": "shared", "Authorization": "Bearer secret-b", "X-Tenant-Id": "t"}
    first_a = await (await client.post("/pay", data=b"x", headers=a)).read()
    first_b = await (await client.post("/pay", data=b"x", headers=b)).read()
    assert first_a != first_b
    assert counting.count("/pay", "shared") == 2

    replay_a = await client.post("/pay", data=b"x", headers=a)
    replay_b = await client.post("/pay", data=b"x", headers=b)
    assert replay_a.headers["Idempotent-Replayed"] == "true"
    assert await replay_a.read() == first_a
    assert await replay_b.read() == first_b
    assert counting.count("/pay", "shared") == 2

    # A third tenant with the same key is new again; a key of A never replays to it.
    c = {**a, "X-Tenant-Id": "other"}
    fresh = await client.post("/pay", data=b"x", headers=c)
    assert "Idempotent-Replayed" not in fresh.headers
    assert await fresh.read() not in (first_a, first_b)


async def test_redis_keys_hold_no_raw_secret_or_key(
    make_gateway: GatewayFactory, upstream, redis_url: str
) -> None:
    client = await make_gateway()
    headers = {"Idempotency-Key": "visible-key-123", "Authorization": "Bearer top-secret"}
    await client.post("/pay", data=b"x", headers=headers)
    r = redis.Redis.from_url(redis_url)
    try:
        keys = list(r.scan_iter())
        assert len(keys) == 1
        key = keys[0].decode()
        assert "top-secret" not in key and "visible-key-123" not in key
        assert key.startswith("idem:{api:") and key.endswith("}")
        fields = r.hgetall(keys[0])
        assert not any(b"top-secret" in value for value in fields.values())
    finally:
        r.close()
