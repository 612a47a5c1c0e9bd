"""The admin listener's /healthz, /readyz and /metrics against real Redis and upstreams."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict

from gateway.config.loading import settings_from_dict
from gateway.config.settings import Admin
from gateway.core.keys import digest
from gateway.errors import ConfigError
from gateway.http.app import create_app
from gateway.http.flow import handler
from gateway.ops.admin import attach_admin
from gateway.telemetry.logs import JsonFormatter
from gateway.telemetry.metrics import Metrics
from testkit.polling import until
from testkit.redis_server import RedisServer

from .gateways import AdminFactory, GatewayFactory, gateway_settings
from .scrape import sample, scrape

REQUESTS = "idem_requests_total"


def one_route(origin: str, failures: int = 1000) -> dict:
    return {
        "upstream": origin,
        "redis": {"breaker": {"failures": failures, "reset": "1h"}},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }


async def test_scripted_sequence_moves_each_counter_by_exactly_one(
    make_gateway: GatewayFactory, make_admin: AdminFactory, upstream, own_redis: RedisServer
) -> None:
    counting, origin = upstream
    settings = settings_from_dict(one_route(origin, failures=1))
    gw = await make_gateway(settings=settings, url=own_redis.url)
    admin = await make_admin(gw)
    before = await scrape(admin)
    assert sample(before, "idem_circuit_state") == 0

    assert (await gw.post("/pay", data=b"a", headers={"Idempotency-Key": "k1"})).status == 201
    assert (await gw.post("/pay", data=b"a", headers={"Idempotency-Key": "k1"})).status == 201
    held = asyncio.ensure_future(gw.post("/gate", headers={"Idempotency-Key": "k2"}))
    await asyncio.wait_for(counting.entered.wait(), 10)
    assert (await gw.post("/gate", headers={"Idempotency-Key": "k2"})).status == 409
    counting.release.set()
    assert (await held).status == 201
    assert (await gw.post("/pay", data=b"b", headers={"Idempotency-Key": "k1"})).status == 422
    own_redis.stop()
    assert (await gw.post("/pay", data=b"c", headers={"Idempotency-Key": "k3"})).status == 503

    after = await scrape(admin)

    def moved(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert moved(REQUESTS, route="api", method="POST", outcome="forwarded") == 2
    assert moved(REQUESTS, route="api", method="POST", outcome="replayed") == 1
    assert moved(REQUESTS, route="api", method="POST", outcome="conflict") == 1
    assert moved(REQUESTS, route="api", method="POST", outcome="mismatch") == 1
    assert moved(REQUESTS, route="api", method="POST", outcome="error") == 1
    assert moved(REQUESTS) == 6
    assert moved("idem_redis_errors_total") == 1
    assert moved("idem_upstream_seconds_count", route="api") == 2
    assert moved("idem_overhead_seconds_count", route="api") == 6
    assert moved("idem_lease_lost_total") == 0
    assert moved("idem_unknown_outcomes_total") == 0
    assert sample(after, "idem_circuit_state") == 2  # one failure opens it (failures: 1)
    assert counting.count("/pay") == 1
    assert counting.count("/gate") == 1


async def test_healthz_and_readyz_follow_redis(
    make_gateway: GatewayFactory, make_admin: AdminFactory, own_redis: RedisServer
) -> None:
    gw = await make_gateway(url=own_redis.url)
    admin = await make_admin(gw)
    ready = await admin.get("/readyz")
    assert ready.status == 200
    assert await ready.json() == {
        "ready": True,
        "redis": True,
        "draining": False,
        "eviction_risk": False,
    }

    own_redis.stop()
    down = await admin.get("/readyz")
    assert down.status == 503
    assert (await down.json())["redis"] is False
    assert (await admin.get("/healthz")).status == 200  # the process itself is fine

    own_redis.start()  # same port, empty script cache: readiness loads the scripts again
    back = await admin.get("/readyz")
    assert back.status == 200
    assert (await gw.post("/pay", headers={"Idempotency-Key": "after"})).status == 201


async def test_readyz_fails_while_draining(redis_url: str, upstream) -> None:
    """Stopping the gateway flips /readyz to 503 while in-flight requests finish."""
    counting, origin = upstream
    app = create_app(gateway_settings(origin), redis_url, Metrics())
    state = attach_admin(app, Admin(port=0))
    gw = TestClient(TestServer(app, host="127.0.0.1"))
    await gw.start_server()
    try:
        async with aiohttp.ClientSession() as admin:
            readyz = f"http://127.0.0.1:{state.port}/readyz"
            async with admin.get(readyz) as resp:
                assert resp.status == 200
            held = asyncio.ensure_future(gw.post("/gate", headers={"Idempotency-Key": "d"}))
            await asyncio.wait_for(counting.entered.wait(), 10)
            closing = asyncio.ensure_future(gw.server.close())

            async def draining() -> bool:
                """readyz reports draining."""
                async with admin.get(readyz) as resp:
                    if resp.status != 503:
                        return False
                    assert await resp.json() == {
                        "ready": False, "redis": True, "draining": True,
                        "eviction_risk": False,
                    }  # fmt: skip
                    return True

            await until(draining, 10, every=0.01)
            counting.release.set()
            assert (await held).status == 201  # the in-flight request was not dropped
            await closing
    finally:
        await gw.close()


async def test_request_id_propagated_and_logged_without_secrets(
    make_gateway: GatewayFactory, upstream, caplog
) -> None:
    counting, _ = upstream
    caplog.set_level(logging.INFO, logger="gateway.http.server.access")
    gw = await make_gateway(scope=["Authorization"])
    headers = {
        "Idempotency-Key": "raw-key-never-logged",
        "Authorization": "Bearer tenant-secret-never-logged",
        "X-Request-Id": "req-abc-123",
    }
    resp = await gw.post("/pay?token=query-secret", data=b"body-never-logged", headers=headers)
    assert resp.status == 201
    assert resp.headers["X-Request-Id"] == "req-abc-123"
    assert CIMultiDict(counting.seen_headers[-1])["X-Request-Id"] == "req-abc-123"

    generated = await gw.post("/pay", headers={"Idempotency-Key": "other"})
    rid = generated.headers["X-Request-Id"]
    assert len(rid) == 32
    assert CIMultiDict(counting.seen_headers[-1])["X-Request-Id"] == rid

    replay = await gw.post("/pay?token=query-secret", data=b"body-never-logged", headers=headers)
    assert replay.headers["Idempotent-Replayed"] == "true"

    lines = [
        JsonFormatter().format(r) for r in caplog.records if r.name == "gateway.http.server.access"
    ]
    assert len(lines) == 3
    first = orjson.loads(lines[0])
    assert first["request_id"] == "req-abc-123"
    assert first["route"] == "api"
    assert first["key_hash"] == digest("raw-key-never-logged")
    assert first["outcome"] == "forwarded"
    assert first["status"] == 201
    assert first["path"] == "/pay"
    assert first["duration_ms"] >= first["upstream_ms"] > 0
    assert orjson.loads(lines[2])["outcome"] == "replayed"
    for line in lines:
        for secret in ("raw-key-never-logged", "tenant-secret", "body-never", "query-secret"):
            assert secret not in line


async def test_request_log_costs_nothing_when_off(make_gateway: GatewayFactory, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.http.server.access")
    gw = await make_gateway()
    assert (await gw.post("/pay", headers={"Idempotency-Key": "quiet"})).status == 201
    assert [r for r in caplog.records if r.name == "gateway.http.server.access"] == []


async def test_a_busy_admin_port_is_an_error_at_start(redis_url: str, upstream) -> None:
    """A gateway never wanders to another admin port: a busy one is an error at start."""
    _, origin = upstream
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        admin = Admin(port=taken.getsockname()[1])
        lone = create_app(gateway_settings(origin), redis_url, Metrics())
        attach_admin(lone, admin)
        server = TestServer(lone, host="127.0.0.1")
        with pytest.raises(
            ConfigError, match=r"admin\.port: cannot listen .*: the address is in use"
        ):
            await server.start_server()
        await server.close()


async def test_unusable_request_id_is_replaced(make_gateway: GatewayFactory, upstream) -> None:
    counting, _ = upstream
    gw = await make_gateway()
    for bad in ("x" * 129, "two words"):
        resp = await gw.post("/pay", headers={"X-Request-Id": bad})
        rid = resp.headers["X-Request-Id"]
        assert rid != bad and len(rid) == 32
        assert CIMultiDict(counting.seen_headers[-1])["X-Request-Id"] == rid


async def test_replays_problems_pass_through_and_faults_name_their_own_request_id(
    make_gateway: GatewayFactory, upstream, caplog, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = await make_gateway(require_key=False)
    key = {"Idempotency-Key": "rid-kinds"}

    async def answer(method: str, path: str, rid: str, **kwargs: Any) -> ClientResponse:
        headers = {"X-Request-Id": rid, **kwargs.pop("headers", {})}
        resp = await gw.request(method, path, headers=headers, **kwargs)
        await resp.read()
        assert resp.headers["X-Request-Id"] == rid, (rid, resp.status)
        return resp

    assert (await answer("POST", "/pay", "rid-first", headers=key, data=b"a")).status == 201
    replay = await answer("POST", "/pay", "rid-replay", headers=key, data=b"a")
    assert replay.headers["Idempotent-Replayed"] == "true"  # the replay's own id, not the first's
    assert (await answer("POST", "/pay", "rid-mismatch", headers=key, data=b"b")).status == 422
    bad = {"Idempotency-Key": "x" * 1000}
    assert (await answer("POST", "/pay", "rid-bad-key", headers=bad, data=b"a")).status == 400
    unprotected = await answer("GET", "/pay", "rid-unprotected")
    assert unprotected.status == 201 and "Idempotent-Replayed" not in unprotected.headers

    # A fault in the gateway itself: aiohttp's own 500, which names the request too.
    def broken(*args: Any) -> None:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(handler, "key_of", broken)
    caplog.set_level(logging.ERROR)
    failed = await answer("POST", "/pay", "rid-fault", headers=key, data=b"a")
    assert failed.status == 500
    assert any(r.exc_info and "injected fault" in str(r.exc_info[1]) for r in caplog.records)


def test_a_record_logged_with_exc_info_false_is_one_json_line() -> None:
    """asyncio's exception handler logs with `exc_info=False` ("Task was destroyed but it
    is pending!"): on the compiled build, which checks the types typeshed gives, that was a
    logging error with a traceback instead of the line."""
    record = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "pending", (), False)
    line = orjson.loads(JsonFormatter().format(record))
    assert (line["msg"], "exc" in line) == ("pending", False)
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert "ValueError: boom" in orjson.loads(JsonFormatter().format(failed))["exc"]
