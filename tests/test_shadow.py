"""Shadow mode: every decision is made and counted, every request still forwarded."""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

from gateway.ops.reload import apply
from testkit.redis_server import RedisServer

from .gateways import AdminFactory, GatewayFactory
from .scrape import sample, scrape

SHADOW = "idem_shadow_decisions_total"


async def test_shadow_forwards_duplicates_and_counts_what_enforce_would_do(
    make_gateway: GatewayFactory, make_admin: AdminFactory, upstream, redis_url: str,
    tmp_path: Path, caplog,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger="gateway.http.server.access")
    counting, origin = upstream
    gw = await make_gateway(mode="shadow", require_key=True)
    admin = await make_admin(gw)
    key = {"Idempotency-Key": "s-1"}

    first = await gw.post("/pay", data=b"a", headers=key)
    assert first.status == 201
    assert "Idempotency-Expires" not in first.headers  # shadow mode changes no answer
    duplicate = await gw.post("/pay", data=b"a", headers=key)
    assert duplicate.status == 201
    assert "Idempotent-Replayed" not in duplicate.headers
    assert "Idempotency-Expires" not in duplicate.headers
    assert await duplicate.read() != await first.read()  # a fresh upstream answer
    assert counting.count("/pay", "s-1") == 2

    other = await gw.post("/pay", data=b"b", headers=key)  # enforce: 422
    assert other.status == 201
    no_key = await gw.post("/pay", data=b"c")  # enforce: 400 (require_key)
    assert no_key.status == 201
    assert counting.count("/pay") == 4

    would = [getattr(r, "fields", {}).get("shadow_would") for r in caplog.records]
    assert [w for w in would if w] == ["replayed", "mismatch", "rejected"]

    text = await scrape(admin)
    assert sample(text, SHADOW, route="api", would="replayed") == 1
    assert sample(text, SHADOW, route="api", would="mismatch") == 1
    assert sample(text, SHADOW, route="api", would="rejected") == 1
    assert sample(text, SHADOW) == 3
    assert sample(text, "idem_requests_total", outcome="shadowed") == 3
    assert sample(text, "idem_requests_total", outcome="forwarded") == 1

    # Enforce the same route (a config reload): the recorded first answer is replayed.
    config = tmp_path / "enforce.yaml"
    config.write_text(yaml.safe_dump({
        "redis": {"url": redis_url, "breaker": {"failures": 1000}},
        "upstream": origin,
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin, "require_key": True}],
    }))  # fmt: skip
    assert apply(gw.server.app, config)
    replay = await gw.post("/pay", data=b"a", headers=key)
    assert replay.status == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert await replay.read() == await first.read()
    assert counting.count("/pay", "s-1") == 3  # first, duplicate, would-be 422; no more


async def test_shadow_forwards_while_redis_is_down(
    make_gateway: GatewayFactory, make_admin: AdminFactory, upstream, own_redis: RedisServer
) -> None:
    counting, _ = upstream
    gw = await make_gateway(url=own_redis.url, mode="shadow")
    admin = await make_admin(gw)
    own_redis.stop()
    resp = await gw.post("/pay", headers={"Idempotency-Key": "down"})
    assert resp.status == 201
    assert "Idempotency-Degraded" not in resp.headers
    assert counting.count("/pay", "down") == 1
    text = await scrape(admin)
    assert sample(text, SHADOW, route="api", would="error") == 1  # enforce: 503 (closed)
    assert sample(text, "idem_requests_total", outcome="bypassed") == 1
