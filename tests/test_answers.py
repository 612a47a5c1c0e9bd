"""Each row of the contract's Answers table, against a real Redis and a counting upstream."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import redis

from gateway.core.keys import digest, hashed_record_key, tenant_id
from testkit.ports import Port

from .gateways import GatewayFactory, gateway_settings
from .upstream import CountingUpstream

KEY = {"Idempotency-Key": "k-1"}


def redis_keys(url: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return list(client.scan_iter())
    finally:
        client.close()


def assert_problem(body: bytes, status: int) -> dict[str, object]:
    doc = orjson.loads(body)
    assert doc["status"] == status
    assert {"type", "title", "status", "detail"} <= doc.keys()
    return doc


async def test_first_request_is_forwarded_once(make_gateway: GatewayFactory, upstream) -> None:
    counting, _ = upstream
    client = await make_gateway()
    resp = await client.post("/pay", data=b"amount=1", headers=KEY)
    assert resp.status == 201
    assert "Idempotent-Replayed" not in resp.headers
    assert orjson.loads(await resp.read())["id"] == "pay_1"
    assert counting.count("/pay", "k-1") == 1


async def test_retry_replays_status_headers_and_exact_body(
    make_gateway: GatewayFactory, upstream
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    scoped = {**KEY, "Authorization": "Bearer t"}  # cookies are replayed within a scope
    first = await client.post("/pay", data=b"amount=1", headers=scoped)
    first_body = await first.read()
    second = await client.post("/pay", data=b"amount=1", headers=scoped)
    assert second.status == 201
    assert second.headers["Idempotent-Replayed"] == "true"
    assert await second.read() == first_body
    assert second.headers["X-Upstream"] == "yes"
    assert second.headers.getall("Set-Cookie") == ["a=1"]
    assert second.headers["Content-Type"] == first.headers["Content-Type"]
    assert counting.count("/pay", "k-1") == 1


async def test_structured_field_key_is_the_same_key(make_gateway: GatewayFactory, upstream) -> None:
    counting, _ = upstream
    client = await make_gateway()
    await client.post("/pay", data=b"x", headers={"Idempotency-Key": "abc"})
    again = await client.post("/pay", data=b"x", headers={"Idempotency-Key": '"abc"'})
    assert again.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/pay") == 1


async def test_duplicate_in_flight_gets_409_with_retry_after(
    make_gateway: GatewayFactory, upstream
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    first = asyncio.ensure_future(client.post("/gate", data=b"x", headers=KEY))
    await counting.entered.wait()
    second = await client.post("/gate", data=b"x", headers=KEY)
    assert second.status == 409
    assert second.headers["Retry-After"].isdigit()
    assert second.content_type == "application/problem+json"
    assert_problem(await second.read(), 409)
    counting.release.set()
    assert (await first).status == 201
    assert counting.count("/gate") == 1


async def test_on_in_flight_wait_answers_the_first_outcome(
    make_gateway: GatewayFactory, upstream
) -> None:
    counting, _ = upstream
    client = await make_gateway(on_in_flight="wait", in_flight_wait="10s")
    first = asyncio.ensure_future(client.post("/gate", data=b"x", headers=KEY))
    await counting.entered.wait()
    second = asyncio.ensure_future(client.post("/gate", data=b"x", headers=KEY))
    await asyncio.sleep(0.05)  # let the duplicate reach its wait; the outcome is asserted below
    assert not second.done()
    counting.release.set()
    a, b = await first, await second
    assert (a.status, b.status) == (201, 201)
    assert await a.read() == await b.read()
    assert b.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/gate") == 1


async def test_on_in_flight_wait_gives_409_when_time_runs_out(
    make_gateway: GatewayFactory, upstream
) -> None:
    counting, _ = upstream
    client = await make_gateway(on_in_flight="wait", in_flight_wait="200ms")
    first = asyncio.ensure_future(client.post("/gate", data=b"x", headers=KEY))
    await counting.entered.wait()
    second = await client.post("/gate", data=b"x", headers=KEY)
    assert second.status == 409
    counting.release.set()
    await first
    assert counting.count("/gate") == 1


async def test_on_in_flight_wait_never_runs_a_call_whose_first_run_ended_unrecorded(
    make_gateway: GatewayFactory, upstream
) -> None:
    """The first request times out (an unknown outcome, released by default): the duplicates
    that waited for it get 409 ended-unrecorded, none of them runs the call (each run may
    have charged a card), and the key is free for a retry, which runs it."""
    counting, _ = upstream
    client = await make_gateway(
        on_in_flight="wait", in_flight_wait="5s", timeouts={"total": "400ms"}
    )
    first = asyncio.ensure_future(client.post("/stall", data=b"x", headers=KEY))
    await counting.entered.wait()
    waiting = [client.post("/stall", data=b"x", headers=KEY) for _ in range(5)]
    answers = await asyncio.gather(first, *waiting)
    assert [answer.status for answer in answers] == [504] + [409] * 5
    for answer in answers[1:]:
        assert orjson.loads(await answer.read())["code"] == "ended-unrecorded"
        assert answer.headers["Retry-After"] == "1"
    assert counting.count("/stall") == 1
    retry = await client.post("/stall", data=b"x", headers=KEY)
    assert retry.status == 504
    assert counting.count("/stall") == 2


async def test_same_key_other_payload_is_422_and_record_untouched(
    make_gateway: GatewayFactory, upstream
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    first = await client.post("/pay", data=b"amount=1", headers=KEY)
    body = await first.read()
    other = await client.post("/pay", data=b"amount=2", headers=KEY)
    assert other.status == 422
    assert_problem(await other.read(), 422)
    other_path = await client.post("/pay/x", data=b"amount=1", headers=KEY)
    assert other_path.status == 422
    replay = await client.post("/pay", data=b"amount=1", headers=KEY)
    assert replay.status == 201 and await replay.read() == body
    assert counting.count("/pay", "k-1") == 1


@pytest.mark.parametrize(
    "value",
    ["", '""', "a" * 256, "has space", "tab\there", '"unterminated', '"bad\\escape"', "é"],
)
async def test_bad_key_is_400_and_nothing_stored(
    make_gateway: GatewayFactory, upstream, redis_url: str, value: str
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    resp = await client.post("/pay", data=b"x", headers={"Idempotency-Key": value})
    assert resp.status == 400
    assert_problem(await resp.read(), 400)
    assert counting.count("/pay") == 0
    assert redis_keys(redis_url) == []


async def test_two_different_keys_in_one_request_is_400(
    make_gateway: GatewayFactory, upstream
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    headers = [("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
    resp = await client.post("/pay", data=b"x", headers=headers)
    assert resp.status == 400
    assert counting.count("/pay") == 0


async def test_missing_key_required_is_400(make_gateway: GatewayFactory, upstream) -> None:
    counting, _ = upstream
    client = await make_gateway(require_key=True)
    resp = await client.post("/pay", data=b"x")
    assert resp.status == 400
    assert orjson.loads(await resp.read())["type"].endswith("missing-key")
    assert counting.count("/pay") == 0


async def test_missing_key_optional_is_proxied_without_idempotency(
    make_gateway: GatewayFactory, upstream, redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    for _ in range(2):
        assert (await client.post("/pay", data=b"x")).status == 201
    assert counting.count("/pay") == 2
    assert redis_keys(redis_url) == []


async def test_body_over_limit_is_413_and_nothing_stored(
    make_gateway: GatewayFactory, upstream, redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway(max_request_body="1KiB")
    resp = await client.post("/pay", data=b"x" * 1025, headers=KEY)
    assert resp.status == 413
    assert_problem(await resp.read(), 413)
    ok = await client.post("/pay", data=b"x" * 1024, headers=KEY)
    assert ok.status == 201
    assert counting.count("/pay") == 1


async def test_body_over_limit_without_length_is_413(
    make_gateway: GatewayFactory, upstream, redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway(max_request_body="1KiB")

    async def chunks():
        for _ in range(4):
            yield b"y" * 512

    resp = await client.post("/pay", data=chunks(), headers=KEY)
    assert resp.status == 413
    assert counting.count("/pay") == 0
    assert redis_keys(redis_url) == []


async def test_redis_unreachable_fails_closed_with_503(
    upstream, make_gateway, refused_port: Port
) -> None:
    counting, _origin = upstream
    dead = f"redis://127.0.0.1:{refused_port.number}/0"
    client = await make_gateway(url=dead)
    resp = await client.post("/pay", data=b"x", headers=KEY)
    assert resp.status == 503
    assert resp.headers["Retry-After"].isdigit()
    assert_problem(await resp.read(), 503)
    assert counting.count("/pay") == 0


async def test_redis_unreachable_fail_open_proxies_and_marks(
    upstream, make_gateway, refused_port: Port
) -> None:
    counting, _origin = upstream
    dead = f"redis://127.0.0.1:{refused_port.number}/0"
    client = await make_gateway(url=dead, fail_mode="open")
    resp = await client.post("/pay", data=b"x", headers=KEY)
    assert resp.status == 201
    assert resp.headers["Idempotency-Degraded"] == "true"
    assert counting.count("/pay") == 1


async def test_a_failed_call_made_failing_open_is_marked_too(
    make_gateway: GatewayFactory, refused_port: Port
) -> None:
    """Its 502 answers a call sent without idempotency: a client must know, as for a 2xx."""
    dead = f"redis://127.0.0.1:{refused_port.number}/0"  # Redis and the upstream both
    settings = gateway_settings(refused_port.url, fail_mode="open")
    client = await make_gateway(settings, url=dead)
    resp = await client.post("/pay", data=b"x", headers=KEY)
    assert resp.status == 502
    assert resp.headers["Idempotency-Degraded"] == "true"


async def test_unprotected_method_is_proxied_untouched(
    make_gateway: GatewayFactory, upstream, redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    for _ in range(2):
        resp = await client.get("/plain", headers=KEY)
        assert resp.status == 200 and await resp.text() == "plain"
    assert counting.count("/plain") == 2
    assert redis_keys(redis_url) == []


async def test_unmatched_path_goes_to_default_upstream(
    make_gateway: GatewayFactory, upstream, redis_url: str
) -> None:
    counting, origin = upstream
    settings = gateway_settings(origin).model_copy(
        update={"routes": (gateway_settings(origin, path_prefix="/pay").routes[0],)}
    )
    client = await make_gateway(settings=settings)
    for _ in range(2):
        assert (await client.post("/status/201", data=b"x", headers=KEY)).status == 201
    assert counting.count("/status/201") == 2
    assert redis_keys(redis_url) == []


async def test_no_route_and_no_default_upstream_is_404(
    make_gateway: GatewayFactory, upstream
) -> None:
    _counting, origin = upstream
    settings = gateway_settings(origin, path_prefix="/pay").model_copy(update={"upstream": None})
    client = await make_gateway(settings=settings)
    resp = await client.post("/elsewhere", data=b"x", headers=KEY)
    assert resp.status == 404
    assert_problem(await resp.read(), 404)


@pytest.mark.parametrize(
    ("status", "recorded"),
    [(200, True), (204, True), (301, True), (404, True), (422, True),
     (409, False), (429, False), (500, False), (503, False)],
)  # fmt: skip
async def test_default_record_policy(
    make_gateway: GatewayFactory, upstream, status: int, recorded: bool
) -> None:
    counting, _ = upstream
    client = await make_gateway()
    url = f"/status/{status}"
    first = await client.put(url, data=b"x", headers=KEY, allow_redirects=False)
    assert first.status == status
    second = await client.put(url, data=b"x", headers=KEY, allow_redirects=False)
    assert second.status == status
    assert (second.headers.get("Idempotent-Replayed") == "true") is recorded
    assert (await second.text() == await first.text()) is recorded
    assert counting.count(f"/status/{status}") == (1 if recorded else 2)


async def test_configured_record_policy(make_gateway: GatewayFactory, upstream) -> None:
    counting, _ = upstream
    client = await make_gateway(record=["2xx", 503])
    for _ in range(2):
        await client.post("/status/503", data=b"x", headers=KEY)
        await client.post("/status/404", data=b"x", headers={"Idempotency-Key": "k-404"})
    assert counting.count("/status/503") == 1
    assert counting.count("/status/404") == 2


async def test_upstream_unreachable_releases_the_key(
    make_gateway: GatewayFactory, upstream, redis_url: str, refused_port: Port
) -> None:
    dead = refused_port.url
    client = await make_gateway(settings=gateway_settings(dead))
    resp = await client.post("/pay", data=b"x", headers=KEY)
    assert resp.status == 502
    assert orjson.loads(await resp.read())["type"].endswith("upstream-unreachable")
    assert redis_keys(redis_url) == []


async def test_hop_by_hop_headers_dropped_and_forwarded_headers_added(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str]
) -> None:
    _counting, _ = upstream
    client = await make_gateway()
    headers = {
        **KEY,
        "Connection": "keep-alive, X-Secret-Hop",
        "X-Secret-Hop": "1",
        "Keep-Alive": "timeout=5",
        "TE": "trailers",
        "Proxy-Authorization": "Basic abc",
        "X-Forwarded-For": "10.0.0.1",
        "X-Kept": "yes",
    }
    resp = await client.post("/echo", data=b"x", headers=headers)
    seen = {k.lower(): v for k, v in orjson.loads(await resp.read())["headers"]}
    for name in ("x-secret-hop", "keep-alive", "te", "proxy-authorization"):
        assert name not in seen
    assert seen["x-kept"] == "yes"
    assert seen["idempotency-key"] == "k-1"
    assert seen["x-forwarded-for"] == "10.0.0.1, 127.0.0.1"
    assert seen["x-forwarded-proto"] == "http"
    assert seen["x-forwarded-host"].startswith("127.0.0.1:")


async def test_a_corrupt_record_is_502_even_when_failing_open(
    make_gateway: GatewayFactory, upstream, redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway(fail_mode="open")
    assert (await client.post("/pay", data=b"x", headers=KEY)).status == 201
    r = redis.Redis.from_url(redis_url)
    try:
        (key,) = list(r.scan_iter())
        r.hset(key, "m", b"not a record")
    finally:
        r.close()
    resp = await client.post("/pay", data=b"x", headers=KEY)
    assert resp.status == 502
    assert orjson.loads(await resp.read())["type"].endswith("record-corrupt")
    assert counting.count("/pay") == 1


@pytest.mark.parametrize("status", [999, 42, 600, 99, "201", True])
async def test_a_recorded_status_outside_100_to_599_replays_as_corrupt(
    make_gateway: GatewayFactory, upstream, redis_url: str, status: object
) -> None:
    counting, origin = upstream
    settings = gateway_settings(origin)
    client = await make_gateway(settings)
    raw_key = f"tampered-{status!r}"
    key = {"Idempotency-Key": raw_key}
    assert (await client.post("/pay", data=b"x", headers=key)).status == 201
    prefix = settings.redis.key_prefix
    rkey = hashed_record_key(prefix, "api", tenant_id([""]), digest(raw_key))
    r = redis.Redis.from_url(redis_url)
    try:
        stored = orjson.loads(r.hget(rkey, "m"))
        r.hset(rkey, "m", orjson.dumps({**stored, "st": status}))
    finally:
        r.close()
    answer = await client.post("/pay", data=b"x", headers=key)
    assert answer.status == 502
    assert orjson.loads(await answer.read())["code"] == "record-corrupt"
    assert counting.count("/pay") == 1
