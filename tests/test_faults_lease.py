"""Leases under stress: a slow upstream, a lost lease (fencing), a client that goes away."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest
import redis

from testkit.polling import until

from .faultkit import metrics_of, records, state, value
from .gateways import GatewayFactory
from .upstream import CountingUpstream

KEY = {"Idempotency-Key": "k-lease"}
LEASE = 0.6


async def test_slow_upstream_keeps_its_claim_for_three_leases(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway(lease=f"{LEASE}s")
    metrics = metrics_of(client)
    first = asyncio.ensure_future(client.post("/gate", data=b"x", headers=KEY))
    await counting.entered.wait()
    entered = time.monotonic()
    # Nine renewals at lease/3 span three leases; duplicates meanwhile are refused.
    conflicts = 0
    while value(metrics, "idem_lease_extensions_total") < 9:
        dup = await client.post("/gate", data=b"x", headers=KEY)
        assert dup.status == 409
        conflicts += 1
        assert state(redis_url) == b"P"
        await asyncio.sleep(LEASE / 6)  # pacing the duplicates, not synchronisation
    assert conflicts >= 3
    assert time.monotonic() - entered >= 3 * LEASE
    counting.release.set()
    answer = await first
    assert answer.status == 201
    replay = await client.post("/gate", data=b"x", headers=KEY)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert await replay.read() == await answer.read()
    assert counting.count("/gate") == 1
    assert value(metrics, "idem_lease_lost_total", route="api") == 0


async def test_lost_lease_does_not_overwrite_the_new_owner(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    counting, _ = upstream
    client = await make_gateway(lease="30s")
    metrics = metrics_of(client)
    old = asyncio.ensure_future(client.post("/gate", data=b"x", headers=KEY))
    await counting.entered.wait()
    # The old owner's lease ends (as when its renewals could not reach Redis) ...
    direct = redis.Redis.from_url(redis_url)
    try:
        [rkey] = direct.keys()
        direct.delete(rkey)
    finally:
        direct.close()
    # ... so a retry claims the key and runs: a new owner.
    new = asyncio.ensure_future(client.post("/gate", data=b"x", headers=KEY))
    await until(lambda: counting.count("/gate") == 2)
    new_token = records(redis_url)[0][b"t"]
    counting.release.set()
    old_answer, new_answer = await old, await new
    # Both clients get their own answers, the old owner's marked as not the record ...
    assert (old_answer.status, new_answer.status) == (201, 201)
    assert old_answer.headers["Idempotency-Outcome"] == "fenced"
    assert "Idempotency-Outcome" not in new_answer.headers
    old_body, new_body = await old_answer.read(), await new_answer.read()
    assert old_body != new_body
    # ... the record is the new owner's, and replays serve it.
    await until(lambda: state(redis_url) == b"C")
    [record] = records(redis_url)
    assert record[b"s"] == b"C" and record[b"t"] == new_token
    assert record[b"b"] == new_body
    replay = await client.post("/gate", data=b"x", headers=KEY)
    assert await replay.read() == new_body
    # The loss is counted once and logged.
    assert value(metrics, "idem_lease_lost_total", route="api") == 1
    assert value(metrics, "idem_fenced_completions_total", route="api") == 1
    assert any("lease lost" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


async def test_client_gone_after_sending_gets_a_replay(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    port = client.server.port
    assert port is not None
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /gate HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: k-lease\r\n"
            b"Content-Length: 1\r\n\r\nx"
        )
        await counting.entered.wait()
    # The client hung up; the upstream call goes on and its outcome is recorded.
    counting.release.set()
    await until(lambda: state(redis_url) == b"C")
    replay = await client.post("/gate", data=b"x", headers=KEY)
    assert replay.status == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert (await replay.text()).startswith("gated #")
    assert counting.count("/gate") == 1


async def test_lost_lease_release_leaves_the_new_owner_alone(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """An owner whose lease was lost and whose call then fails does not delete the key
    that a newer owner holds (release is fenced by the token too)."""
    counting, _ = upstream
    old_gw = await make_gateway(timeouts={"total": "300ms"})
    new_gw = await make_gateway(timeouts={"total": "2s"})
    old = asyncio.ensure_future(old_gw.post("/stall", data=b"x", headers=KEY))
    await counting.entered.wait()
    direct = redis.Redis.from_url(redis_url)
    try:
        [rkey] = direct.keys()
        direct.delete(rkey)  # the old owner's lease ends
    finally:
        direct.close()
    new = asyncio.ensure_future(new_gw.post("/stall", data=b"x", headers=KEY))
    await until(lambda: counting.count("/stall") == 2)
    [record] = records(redis_url)
    new_token = record[b"t"]
    assert (await old).status == 504  # the old owner gives up and releases ...
    [record] = records(redis_url)  # ... but the key is still the new owner's
    assert record[b"s"] == b"P" and record[b"t"] == new_token
    assert value(metrics_of(old_gw), "idem_lease_lost_total", route="api") == 1
    assert (await new).status == 504
    assert records(redis_url) == []  # the new owner's own release works
