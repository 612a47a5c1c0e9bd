"""Recorded answers and replays say until when their key is kept: Idempotency-Expires."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

from .gateways import GatewayFactory


def expires_in(headers) -> float:
    return parsedate_to_datetime(headers["Idempotency-Expires"]).timestamp() - time.time()


async def test_recorded_answer_and_replay_carry_the_expiry(make_gateway: GatewayFactory) -> None:
    gw = await make_gateway(retention="1h")
    key = {"Idempotency-Key": "r-1"}
    first = await gw.post("/pay", headers=key)
    assert first.status == 201
    assert 3590 < expires_in(first.headers) <= 3601
    replay = await gw.post("/pay", headers=key)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert 3590 < expires_in(replay.headers) <= 3601
    assert (
        abs(
            parsedate_to_datetime(replay.headers["Idempotency-Expires"])
            - parsedate_to_datetime(first.headers["Idempotency-Expires"])
        ).total_seconds()
        <= 2
    )


async def test_answers_that_are_not_kept_carry_no_expiry(make_gateway: GatewayFactory) -> None:
    gw = await make_gateway()
    released = await gw.post("/status/503", headers={"Idempotency-Key": "r-2"})
    assert released.status == 503
    assert "Idempotency-Expires" not in released.headers
    assert (await gw.post("/pay", data=b"a", headers={"Idempotency-Key": "r-3"})).status == 201
    mismatch = await gw.post("/pay", data=b"b", headers={"Idempotency-Key": "r-3"})
    assert mismatch.status == 422
    assert "Idempotency-Expires" not in mismatch.headers
    plain = await gw.get("/plain")
    assert "Idempotency-Expires" not in plain.headers
