"""Review: records the gateway cannot read, beyond `\\x00garbage`: the operator's look says
'corrupt' (not a 500), and clients get 502 record-corrupt (not a 500)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from .conftest import AdminFactory, GatewayFactory
from .test_key_ops import AUTH


@pytest.mark.parametrize(
    ("field", "value"), [("m", b"[]"), ("m", b"1"), ("m", b'"text"'), ("c", b"not-a-number")]
)
async def test_show_and_replay_of_a_corrupt_record(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: Any,
    redis_url: str,
    field: str,
    value: bytes,
) -> None:
    gw = await make_gateway()
    admin = await make_admin(gw)
    assert (await gw.post("/pay", headers={"Idempotency-Key": "c1"})).status == 201
    plain = redis.Redis.from_url(redis_url)
    try:
        [rkey] = plain.keys()
        plain.hset(rkey, field, value)
    finally:
        plain.close()
    shown = await admin.post("/keys/show", headers=AUTH, json={"route": "api", "key": "c1"})
    replay = await gw.post("/pay", headers={"Idempotency-Key": "c1"})
    assert (shown.status, replay.status) == (200, 502 if field == "m" else 201)
    assert (await shown.json())["state"] == "corrupt"
